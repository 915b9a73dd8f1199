// prof_bt_X CALLS: walks its own stack from a leaf under a recursion of 6 frames, CALLS
// times, with glibc's backtrace() and with libgcc's _Unwind_Backtrace, and prints the frames
// each found ("backtrace N", "unwind M", the same every time). Built without flags
// (prof_bt_plain, for --trace '*', which traces libc's backtrace too) and with
// -fpatchable-function-entry=5 (prof_bt_pfe). A frame whose return address an exit probe
// redirected ends a walk (no CFI for the exit trampoline): under --policy full the walk
// found 0 frames instead of 11 before the probes layer wrote the frames back first.
// Thread safety: single-threaded.
#include <execinfo.h>
#include <unwind.h>

#include <cstdio>
#include <cstdlib>

#define NOIPA __attribute__((noipa))

namespace {
_Unwind_Reason_Code count_frame(_Unwind_Context*, void* arg) {
  ++*static_cast<int*>(arg);
  return _URC_NO_REASON;
}
}  // namespace

extern "C" {
NOIPA int bt_leaf(int how) {
  if (how == 0) {
    void* frames[64];
    return backtrace(frames, 64);
  }
  int n = 0;
  _Unwind_Backtrace(count_frame, &n);
  return n;
}
NOIPA int bt_mid(int depth, int how) {
  const int n = depth == 0 ? bt_leaf(how) : bt_mid(depth - 1, how);
  return n + 0 * depth;  // not a tail call: every level keeps its frame
}
}

int main(int argc, char** argv) {
  const int calls = argc > 1 ? std::atoi(argv[1]) : 100;
  int bt = 0, uw = 0;
  for (int i = 0; i < calls; ++i) {
    const int b = bt_mid(5, 0), u = bt_mid(5, 1);
    if (i > 0 && (b != bt || u != uw)) {
      std::printf("changed at call %d: backtrace %d -> %d, unwind %d -> %d\n", i, bt, b, uw, u);
      return 1;
    }
    bt = b;
    uw = u;
  }
  std::printf("backtrace %d\nunwind %d\n", bt, uw);
  return 0;
}
