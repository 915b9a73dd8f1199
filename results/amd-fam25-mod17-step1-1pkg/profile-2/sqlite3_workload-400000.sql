-- SQL workload for `crossmod profile --trace 'sqlite3_*' -- sqlite3 :memory:` (issue 12):
-- inserts, an index, aggregates, a join, updates and deletes over 100k rows. Deterministic
-- output. Run: sqlite3 :memory: < sqlite3_workload.sql
CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT, c REAL, g INTEGER);
WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM n WHERE x < 400000)
INSERT INTO t SELECT x, 'row' || (x * 7919 % 100003), x * 1.5, x % 97 FROM n;
CREATE INDEX tb ON t(b);
CREATE TABLE groups(g INTEGER PRIMARY KEY, name TEXT);
WITH RECURSIVE n(x) AS (SELECT 0 UNION ALL SELECT x+1 FROM n WHERE x < 96)
INSERT INTO groups SELECT x, 'group' || x FROM n;
SELECT count(*), sum(c), max(length(b)) FROM t;
SELECT b FROM t WHERE a % 25000 = 0 ORDER BY b;
SELECT groups.name, count(*), round(avg(t.c), 3) FROM t JOIN groups USING (g)
  GROUP BY groups.name ORDER BY count(*) DESC, groups.name LIMIT 5;
SELECT count(*) FROM t WHERE b LIKE 'row1%';
UPDATE t SET c = c * 2 WHERE a % 3 = 0;
SELECT sum(c) FROM t;
DELETE FROM t WHERE a > 75000;
SELECT count(*), sum(g) FROM t;
SELECT count(DISTINCT substr(b, 1, 5)) FROM t;
