#include <cstdio>
#include <stdexcept>
#include <thread>
#include <vector>
__attribute__((noinline)) int thrower(int i) { if (i % 3 == 0) throw std::runtime_error("x"); return i; }
__attribute__((noinline)) int middle(int i) { return thrower(i) + 1; }
__attribute__((noinline)) long work(int n) {
  long s = 0;
  for (int i = 0; i < n; ++i) { try { s += middle(i); } catch (const std::exception&) { s -= 1; } }
  return s;
}
int main(int argc, char** argv) {
  int n = argc > 1 ? atoi(argv[1]) : 100000;
  std::vector<std::thread> ts; std::vector<long> r(4);
  for (int t = 0; t < 4; ++t) ts.emplace_back([&, t] { r[t] = work(n); });
  for (auto& t : ts) t.join();
  printf("%ld %ld\n", r[0], r[3]);
}
