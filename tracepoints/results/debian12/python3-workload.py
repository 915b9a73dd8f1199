def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)
d = {}
for i in range(20000):
    d[str(i)] = i * i
print(fib(20), sum(d.values()), len(sorted(d)))
