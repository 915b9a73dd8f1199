// crossmod-trace --functions PATTERN [--out FILE] [--refused FILE] [--jump-only] [--latency]
//                -- PROGRAM ARGS...
// Runs PROGRAM with libcrossmod_trace.so preloaded (found beside this binary) and the
// options passed in the environment; exec keeps the program's pid, output and exit status.
// --latency preloads the probe layer's libcrossmod_probes.so instead (its tracepoint
// provider: entry AND exit probes by return-address redirection), whose table adds the
// exits and the mean time per call of each function.
// Exit code 2 (one line on stderr) for bad usage, 127 if PROGRAM cannot be executed.
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

int usage(const char* why) {
  std::fprintf(stderr,
               "crossmod-trace: %s\nusage: crossmod-trace --functions PATTERN[:PATTERN...] "
               "[--out FILE] [--refused FILE] [--jump-only] [--latency] -- PROGRAM [ARGS...]\n",
               why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string functions, out, refused;
  bool latency = false, jump_only = false;
  int i = 1;
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a == "--jump-only") {
      jump_only = true;
    } else if (a == "--latency") {
      latency = true;
    } else if ((a == "--functions" || a == "--out" || a == "--refused") && i + 1 < argc) {
      (a == "--functions" ? functions : a == "--out" ? out : refused) = argv[++i];
    } else {
      return usage(("unknown or incomplete option " + a).c_str());
    }
  }
  if (functions.empty()) return usage("--functions is required");
  if (i >= argc) return usage("no PROGRAM after --");

  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return usage("cannot read /proc/self/exe");
  self[n] = '\0';
  const std::string dir = std::string(self).substr(0, std::string(self).rfind('/') + 1);
  std::string lib = dir + "libcrossmod_trace.so";
  if (latency) {
    // Beside this binary (an install), else where the build put it.
    lib = dir + "libcrossmod_probes.so";
#ifdef CROSSMOD_PROBES_LIB
    if (access(lib.c_str(), R_OK) != 0) lib = CROSSMOD_PROBES_LIB;
#endif
  }
  if (access(lib.c_str(), R_OK) != 0) return usage(("missing " + lib).c_str());
  std::string preload = lib;
  if (const char* old = std::getenv("LD_PRELOAD"); old != nullptr && *old != '\0')
    preload += std::string(":") + old;
  setenv("LD_PRELOAD", preload.c_str(), 1);
  if (latency) {
    setenv("CROSSMOD_PROBES_TRACE", functions.c_str(), 1);
    setenv("CROSSMOD_PROBES_TRACE_EXIT", "1", 1);
    if (jump_only) setenv("CROSSMOD_PROBES_TRACE_JUMP_ONLY", "1", 1);
    if (!out.empty()) setenv("CROSSMOD_PROBES_OUT", out.c_str(), 1);
    if (!refused.empty()) setenv("CROSSMOD_PROBES_TRACE_REFUSED", refused.c_str(), 1);
  } else {
    if (jump_only) setenv("CROSSMOD_TRACE_JUMP_ONLY", "1", 1);
    setenv("CROSSMOD_TRACE_FUNCTIONS", functions.c_str(), 1);
    if (!out.empty()) setenv("CROSSMOD_TRACE_OUT", out.c_str(), 1);
    if (!refused.empty()) setenv("CROSSMOD_TRACE_REFUSED", refused.c_str(), 1);
  }
  execvp(argv[i], argv + i);
  std::fprintf(stderr, "crossmod-trace: cannot execute %s: %s\n", argv[i], std::strerror(errno));
  return 127;
}
