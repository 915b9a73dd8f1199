// The library prof_jvmhost loads the way the java launcher loads libjvm.so (dlopen,
// RTLD_NOW | RTLD_GLOBAL): it exports a function with the name of libjvm's entry point,
// JNI_CreateJavaVM, and one function to call. Nothing of HotSpot is here: the name alone
// tells the probes layer that HotSpot walks frames by their return addresses
// (probes/src/provider_tracepoint.cpp, hosts_hotspot), so --trace gives entry probes only.
// Thread safety: both functions touch only their arguments.
extern "C" __attribute__((noipa, visibility("default"))) int JNI_CreateJavaVM(void** vm, void** env, void* args) {
  return vm == nullptr && env == nullptr && args == nullptr ? -1 : 0;
}

extern "C" __attribute__((noipa, visibility("default"))) unsigned jvh_leaf(unsigned x) {
  unsigned a = x;
  for (unsigned i = 0; i < 20; ++i) a = a * 2654435761u + i;
  return a;
}
