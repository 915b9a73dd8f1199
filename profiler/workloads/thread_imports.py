"""Sixteen threads, each hashing a little and then importing one module (most of them C
extension modules that Python loads with dlopen: sqlite3 pulls in libsqlite3, ssl
libssl and libcrypto), run by Debian's /usr/bin/python3. A check of --trace on objects
loaded after start-up, from many threads at once (profiler/README.md, Known problems).
Prints each module's name with a checksum that does not depend on thread timing."""
import hashlib
import importlib
import threading

MODULES = ["json", "decimal", "sqlite3", "ctypes", "lzma", "bz2", "ssl", "csv", "array", "zlib", "_struct",
           "select", "mmap", "unicodedata", "binascii", "_random"]
results = []


def work(i):
    acc = 0
    for k in range(2000):
        acc += len(hashlib.md5(str(k + i).encode()).hexdigest())
    importlib.import_module(MODULES[i])
    for k in range(2000):
        acc += k % 7
    results.append((MODULES[i], acc))


threads = [threading.Thread(target=work, args=(i,)) for i in range(len(MODULES))]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(sorted(results))
