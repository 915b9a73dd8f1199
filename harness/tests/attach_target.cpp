// Test target for live attach (attach_smoke.cpp, attach_tool): threads in the states an
// injector meets. Two workers compute a checksum with SSE state live in registers and
// record their longest gap between rounds (their heartbeat); a reader blocks in read() on
// stdin; a sleeper loops on relative clock_nanosleep, another on absolute deadlines; the
// main thread waits in pthread_join; with --libc-spinner, one more thread spends nearly
// all its time inside libc's memset. Prints "ready ..." with every thread id, runs until
// stdin reaches EOF, then prints one line per thread and exits 0.
// `attach_target --checksum SEED ROUNDS` prints the checksum a worker with that seed has
// after ROUNDS rounds, computed without threads: the reference for an attached run.
// Threads: the ones above; results are published through joins.
#include <emmintrin.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

constexpr std::int64_t kSleepNs = 200'000'000;
std::atomic<bool> g_stop{false};

std::int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

timespec to_timespec(std::int64_t ns) {
  return {static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
}

pid_t gettid_() { return static_cast<pid_t>(syscall(SYS_gettid)); }

struct Lanes {
  __m128i a, b;
};

Lanes seed_lanes(std::uint64_t seed) {
  return {_mm_set_epi64x(static_cast<long long>(seed), 0x9e3779b97f4a7c15LL),
          _mm_set_epi64x(0x6a09e667f3bcc908LL, static_cast<long long>(seed * 3 + 1))};
}

// One round: 4096 dependent steps that keep both lanes in xmm registers.
inline void round_(Lanes* l) {
  __m128i a = l->a, b = l->b;
  for (int i = 0; i < 4096; ++i) {
    a = _mm_add_epi64(a, b);
    b = _mm_xor_si128(b, _mm_shuffle_epi32(a, 0x4e));
    a = _mm_or_si128(_mm_slli_epi64(a, 13), _mm_srli_epi64(a, 51));
  }
  l->a = a;
  l->b = b;
}

std::uint64_t digest(const Lanes& l) {
  alignas(16) std::uint64_t w[4];
  _mm_store_si128(reinterpret_cast<__m128i*>(w), l.a);
  _mm_store_si128(reinterpret_cast<__m128i*>(w + 2), l.b);
  return w[0] ^ (w[1] * 3) ^ (w[2] * 5) ^ (w[3] * 7);
}

struct Worker {
  std::uint64_t seed = 0;
  std::atomic<pid_t> tid{0};
  std::uint64_t rounds = 0;
  std::int64_t max_gap_ns = 0;
  std::uint64_t checksum = 0;
};

void* work(void* p) {
  auto* w = static_cast<Worker*>(p);
  w->tid = gettid_();
  Lanes l = seed_lanes(w->seed);
  std::int64_t prev = now_ns();
  while (!g_stop.load(std::memory_order_relaxed)) {
    round_(&l);
    ++w->rounds;
    const std::int64_t t = now_ns();
    if (t - prev > w->max_gap_ns) w->max_gap_ns = t - prev;
    prev = t;
  }
  w->checksum = digest(l);
  return nullptr;
}

struct Reader {
  std::atomic<pid_t> tid{0};
  std::string data;
  int reads = 0, errors = 0, last_errno = 0;
};

void* read_stdin(void* p) {
  auto* r = static_cast<Reader*>(p);
  r->tid = gettid_();
  char buf[256];
  for (;;) {
    const ssize_t n = read(0, buf, sizeof buf);
    if (n == 0) break;
    if (n < 0) {
      ++r->errors;
      r->last_errno = errno;
      if (errno == EINTR) continue;
      break;
    }
    ++r->reads;
    r->data.append(buf, static_cast<std::size_t>(n));
  }
  return nullptr;
}

struct Sleeper {
  bool absolute = false;
  std::atomic<pid_t> tid{0};
  int sleeps = 0, short_sleeps = 0, errors = 0, last_error = 0;
};

void* sleep_loop(void* p) {
  auto* s = static_cast<Sleeper*>(p);
  s->tid = gettid_();
  while (!g_stop.load(std::memory_order_relaxed)) {
    const std::int64_t t0 = now_ns();
    const timespec ts = to_timespec(s->absolute ? t0 + kSleepNs : kSleepNs);
    const int r = clock_nanosleep(CLOCK_MONOTONIC, s->absolute ? TIMER_ABSTIME : 0, &ts, nullptr);
    ++s->sleeps;
    if (r != 0) {
      ++s->errors;
      s->last_error = r;
    } else if (now_ns() - t0 < kSleepNs) {
      ++s->short_sleeps;
    }
  }
  return nullptr;
}

// The reader's data as one word: "-" when empty, newline and space spelled out.
struct Spinner {
  std::atomic<pid_t> tid{0};
  long rounds = 0, errors = 0;
};

// Called through a volatile pointer so the compiler cannot inline it: the thread's pc is
// inside libc's memset almost all the time.
void* (*volatile g_memset)(void*, int, std::size_t) = std::memset;

void* spin_in_libc(void* p) {
  auto* s = static_cast<Spinner*>(p);
  s->tid = gettid_();
  std::string buf(1 << 20, '\0');
  for (unsigned char v = 1; !g_stop.load(std::memory_order_relaxed); ++v) {
    g_memset(buf.data(), v, buf.size());
    if (static_cast<unsigned char>(buf[buf.size() / 2]) != v ||
        static_cast<unsigned char>(buf.back()) != v)
      ++s->errors;
    ++s->rounds;
  }
  return nullptr;
}

std::string escaped(const std::string& s) {
  if (s.empty()) return "-";
  std::string out;
  for (const char c : s) {
    if (c == '\n')
      out += "\\n";
    else if (c == ' ')
      out += "\\s";
    else
      out += c;
  }
  return out;
}

int checksum_mode(char** argv) {
  const std::uint64_t seed = std::strtoull(argv[2], nullptr, 10);
  const std::uint64_t rounds = std::strtoull(argv[3], nullptr, 10);
  Lanes l = seed_lanes(seed);
  for (std::uint64_t i = 0; i < rounds; ++i) round_(&l);
  std::printf("%016llx\n", static_cast<unsigned long long>(digest(l)));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::strcmp(argv[1], "--checksum") == 0) return checksum_mode(argv);
  const bool spinner_on = argc == 2 && std::strcmp(argv[1], "--libc-spinner") == 0;
  if (argc != 1 && !spinner_on) {
    std::fprintf(stderr, "usage: attach_target [--libc-spinner | --checksum SEED ROUNDS]\n");
    return 2;
  }
  Worker workers[2];
  workers[0].seed = 1;
  workers[1].seed = 2;
  Reader reader;
  Sleeper sleeper, abs_sleeper;
  abs_sleeper.absolute = true;
  Spinner spinner;
  pthread_t th[6];
  pthread_create(&th[0], nullptr, work, &workers[0]);
  pthread_create(&th[1], nullptr, work, &workers[1]);
  pthread_create(&th[2], nullptr, read_stdin, &reader);
  pthread_create(&th[3], nullptr, sleep_loop, &sleeper);
  pthread_create(&th[4], nullptr, sleep_loop, &abs_sleeper);
  if (spinner_on) pthread_create(&th[5], nullptr, spin_in_libc, &spinner);
  while (workers[0].tid == 0 || workers[1].tid == 0 || reader.tid == 0 || sleeper.tid == 0 ||
         abs_sleeper.tid == 0 || (spinner_on && spinner.tid == 0))
    sched_yield();
  std::printf(
      "ready pid %d main %d worker0 %d worker1 %d reader %d sleeper %d abs_sleeper %d "
      "spinner %d\n",
      getpid(), gettid_(), workers[0].tid.load(), workers[1].tid.load(), reader.tid.load(),
      sleeper.tid.load(), abs_sleeper.tid.load(), spinner.tid.load());
  std::fflush(stdout);
  pthread_join(th[2], nullptr);
  g_stop = true;
  for (int i : {0, 1, 3, 4}) pthread_join(th[i], nullptr);
  if (spinner_on) {
    pthread_join(th[5], nullptr);
    std::printf("spinner tid %d rounds %ld errors %ld\n", spinner.tid.load(), spinner.rounds,
                spinner.errors);
  }
  for (int i = 0; i < 2; ++i)
    std::printf("worker%d tid %d seed %llu rounds %llu checksum %016llx max_gap_ns %lld\n", i,
                workers[i].tid.load(), static_cast<unsigned long long>(workers[i].seed),
                static_cast<unsigned long long>(workers[i].rounds),
                static_cast<unsigned long long>(workers[i].checksum),
                static_cast<long long>(workers[i].max_gap_ns));
  std::printf("reader tid %d reads %d errors %d errno %d data %s\n", reader.tid.load(),
              reader.reads, reader.errors, reader.last_errno, escaped(reader.data).c_str());
  for (const Sleeper* s : {&sleeper, &abs_sleeper})
    std::printf("%s tid %d sleeps %d short %d errors %d last_error %d\n",
                s->absolute ? "abs_sleeper" : "sleeper", s->tid.load(), s->sleeps, s->short_sleeps,
                s->errors, s->last_error);
  return 0;
}
