// Built with -finstrument-functions -fno-plt: the hooks are called through the GOT
// (`call *__cyg_profile_func_enter@GOTPCREL(%rip)`), a 6-byte indirect call the probe
// layer does not toggle.
namespace workload {
__attribute__((noinline)) int cyg_noplt(int x) { return x * 2; }
}  // namespace workload
