#!/usr/bin/python3
"""A Python program that forks N children without exec (os.fork), each doing ~10 ms of
dictionary work and leaving by os._exit, as a multiprocessing worker does; a child still
alive after 5 s is killed and counted as hung. With `pool W`: a multiprocessing pool of W
forked workers (start method fork) mapping 8 tasks of 300,000 dict insertions each. For
the profiler's fork handling:

    build/crossmod profile --trace 'Py*' -- /usr/bin/python3 profiler/workloads/fork_loop.py 100
    build/crossmod profile --trace 'Py*' -- /usr/bin/python3 profiler/workloads/fork_loop.py pool 2
"""
import os
import sys
import time


def work(n):
    d = {}
    for i in range(n):
        d[str(i)] = [i, i * 2]
    return len(d)


def pool(workers):
    import multiprocessing as mp
    mp.set_start_method("fork")
    with mp.Pool(workers) as p:
        print("items", sum(p.map(work, [300000] * 8)))
    return 0


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "pool":
        return pool(int(sys.argv[2]))
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    hung = 0
    for _ in range(n):
        work(2000)
        pid = os.fork()
        if pid == 0:
            work(20000)
            os._exit(0)
        t0 = time.time()
        while True:
            r, _st = os.waitpid(pid, os.WNOHANG)
            if r == pid:
                break
            if time.time() - t0 > 5:
                hung += 1
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                break
            time.sleep(0.001)
    print("forks", n, "hung", hung)
    return 1 if hung else 0


if __name__ == "__main__":
    sys.exit(main())
