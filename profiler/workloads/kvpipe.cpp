// kvpipe: an ordinary 8-thread C++ program (a small key-value store with a compression
// and checksum pipeline) that knows nothing about crossmod: the "real" multi-threaded
// workload of issue 12, built once per compiler-assisted provider
// (-finstrument-functions, -fpatchable-function-entry=5).
//
// Each thread owns a key range and runs --ops operations: generate a record (xorshift
// PRNG), hash the key, put it into one of 64 mutex-protected shards (std::unordered_map)
// or get a key written earlier, and every 256 operations sort the batch's keys, compress
// the batch's values (a small LZ77 with a 4 KiB window) and checksum the result (CRC-32).
// The final checksum depends only on --ops/--threads/--seed, never on thread timing, so
// a profiled run must print the same line as a plain one.
//
//   kvpipe [--threads 8] [--ops N] [--seed S]
// Exit 0; bad options: one line on stderr, exit 2.
#include <algorithm>
#include <array>
#include <cerrno>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "workload_args.hpp"

namespace kv {

struct Rng {
  std::uint64_t s;
  std::uint64_t next() noexcept {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
};

std::array<std::uint32_t, 256> g_crc_table;

void init_crc_table() {
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    g_crc_table[i] = c;
  }
}

std::uint32_t crc32(const std::uint8_t* p, std::size_t n, std::uint32_t crc = 0) {
  crc = ~crc;
  for (std::size_t i = 0; i < n; ++i) crc = g_crc_table[(crc ^ p[i]) & 0xFFu] ^ (crc >> 8);
  return ~crc;
}

std::uint64_t hash_key(std::uint64_t key) {
  std::uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < 8; ++i) {
    h ^= (key >> (8 * i)) & 0xFFu;
    h *= 1099511628211ull;
  }
  return h;
}

std::vector<std::uint8_t> make_value(Rng& rng) {
  // Compressible text-like bytes: words from a small alphabet with repeats.
  static constexpr char kWords[][8] = {"alpha", "beta", "gamma", "delta", "key", "value", "node", "edge"};
  const std::size_t len = 64 + rng.next() % 192;
  std::vector<std::uint8_t> v;
  v.reserve(len + 8);
  while (v.size() < len) {
    const char* w = kWords[rng.next() % 8];
    v.insert(v.end(), w, w + std::strlen(w));
    v.push_back(' ');
  }
  v.resize(len);
  return v;
}

// LZ77 with a naive backwards search over a 4 KiB window: literal runs and (offset,length)
// pairs. Output only feeds the checksum.
std::size_t find_match(const std::vector<std::uint8_t>& in, std::size_t pos, std::size_t& best_off) {
  std::size_t best = 0;
  const std::size_t start = pos > 4096 ? pos - 4096 : 0;
  for (std::size_t cand = pos; cand-- > start && pos - cand <= 4096;) {
    if (in[cand] != in[pos]) continue;
    std::size_t len = 0;
    while (pos + len < in.size() && len < 255 && in[cand + len] == in[pos + len]) ++len;
    if (len > best) {
      best = len;
      best_off = pos - cand;
      if (len >= 64) break;
    }
    if (pos - cand > 512 && best >= 8) break;
  }
  return best;
}

std::vector<std::uint8_t> compress(const std::vector<std::uint8_t>& in) {
  std::vector<std::uint8_t> out;
  out.reserve(in.size() / 2);
  std::size_t pos = 0;
  while (pos < in.size()) {
    std::size_t off = 0;
    const std::size_t len = find_match(in, pos, off);
    if (len >= 4) {
      out.push_back(0xFF);
      out.push_back(static_cast<std::uint8_t>(off & 0xFFu));
      out.push_back(static_cast<std::uint8_t>(off >> 8));
      out.push_back(static_cast<std::uint8_t>(len));
      pos += len;
    } else {
      out.push_back(in[pos++]);
    }
  }
  return out;
}

struct Entry {
  std::vector<std::uint8_t> value;
  std::uint32_t crc = 0;
};

class Store {
 public:
  static constexpr std::size_t kShards = 64;
  void put(std::uint64_t key, std::vector<std::uint8_t> value) {
    Shard& s = shard_for(key);
    const std::uint32_t c = crc32(value.data(), value.size());
    std::lock_guard<std::mutex> lock(s.mu);
    Entry& e = s.map[key];
    e.value = std::move(value);
    e.crc = c;
  }
  bool get(std::uint64_t key, std::uint32_t& crc) {
    Shard& s = shard_for(key);
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.map.find(key);
    if (it == s.map.end()) return false;
    crc = it->second.crc;
    return true;
  }
  std::uint64_t checksum() {
    std::uint64_t sum = 0, n = 0;
    for (Shard& s : shards_) {
      std::lock_guard<std::mutex> lock(s.mu);
      for (const auto& [k, e] : s.map) {
        sum += hash_key(k) ^ e.crc;
        ++n;
      }
    }
    return sum ^ (n << 48);
  }

 private:
  struct Shard {
    std::mutex mu;
    std::unordered_map<std::uint64_t, Entry> map;
  };
  Shard& shard_for(std::uint64_t key) { return shards_[hash_key(key) % kShards]; }
  std::array<Shard, kShards> shards_;
};

std::uint64_t process_batch(std::vector<std::uint64_t>& keys, std::vector<std::uint8_t>& blob) {
  std::sort(keys.begin(), keys.end(), [](std::uint64_t a, std::uint64_t b) { return hash_key(a) < hash_key(b); });
  const std::vector<std::uint8_t> packed = compress(blob);
  std::uint64_t h = crc32(packed.data(), packed.size());
  for (std::uint64_t k : keys) h = h * 31 + hash_key(k);
  keys.clear();
  blob.clear();
  return h ^ (static_cast<std::uint64_t>(packed.size()) << 32);
}

std::uint64_t worker(Store& store, unsigned tid, std::uint64_t ops, std::uint64_t seed) {
  Rng rng{seed * 0x9E3779B97F4A7C15ull + tid + 1};
  const std::uint64_t base = static_cast<std::uint64_t>(tid) << 40;
  std::uint64_t written = 0, acc = 0;
  std::vector<std::uint64_t> keys;
  std::vector<std::uint8_t> blob;
  for (std::uint64_t i = 0; i < ops; ++i) {
    if (written == 0 || rng.next() % 10 < 7) {
      const std::uint64_t key = base | (rng.next() % (ops / 2 + 1));
      std::vector<std::uint8_t> v = make_value(rng);
      blob.insert(blob.end(), v.begin(), v.end());
      keys.push_back(key);
      store.put(key, std::move(v));
      ++written;
    } else {
      std::uint32_t crc = 0;
      const std::uint64_t key = base | (rng.next() % (ops / 2 + 1));
      if (store.get(key, crc)) acc += crc;
    }
    if (keys.size() == 256) acc ^= process_batch(keys, blob);
  }
  if (!keys.empty()) acc ^= process_batch(keys, blob);
  return acc;
}

}  // namespace kv

namespace {
[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr, "kvpipe: %s (usage: kvpipe [--threads N] [--ops N] [--seed S])\n", msg.c_str());
  std::exit(2);
}
}  // namespace

int main(int argc, char** argv) {
  std::uint64_t threads = 8, ops = 100000, seed = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    std::uint64_t* target = a == "--threads" ? &threads : a == "--ops" ? &ops : a == "--seed" ? &seed : nullptr;
    if (target == nullptr) usage_error("unknown option '" + a + "'");
    if (!workload::parse_u64(v, *target)) usage_error(a + " wants a non-negative integer");
    ++i;
  }
  if (threads == 0 || threads > 256) usage_error("--threads wants 1..256");
  if (ops == 0) usage_error("--ops wants a positive integer");
  kv::init_crc_table();
  kv::Store store;
  std::vector<std::uint64_t> accs(threads);
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&, t] { accs[t] = kv::worker(store, t, ops, seed); });
  for (auto& th : pool) th.join();
  std::uint64_t acc = 0;
  for (std::uint64_t a : accs) acc += a;
  std::printf("kvpipe: %" PRIu64 " threads x %" PRIu64 " ops, batches %016" PRIx64 ", store %016" PRIx64 "\n",
              threads, ops, acc, store.checksum());
  return 0;
}
