// The big-program case of `crossmod profile --trace '*'` (profiler/workloads/README.md):
// run from source, `java profiler/workloads/Hello.java`, so that the java launcher loads
// libjvm and compiles this file in memory before four threads each sum 20 million
// residues and print the sum (each prints 59999997).
public class Hello {
  public static void main(String[] a) throws Exception {
    Thread[] t = new Thread[4];
    for (int i = 0; i < 4; i++) {
      t[i] = new Thread(() -> {
        long s = 0;
        for (int k = 0; k < 20_000_000; k++) s += k % 7;
        System.out.println(s);
      });
      t[i].start();
    }
    for (Thread x : t) x.join();
  }
}
