// Native-ELF lane only: llamafile's CPU fast paths (llamafile/sgemm.cpp) are built by cosmocc alone.
// A tree whose ggml-cpu calls them gets these instead: each answers "not handled", and ggml-cpu then
// runs its own generic kernels, so the native build loses a fast path, never a result.
//
// The functions have C linkage, so they link by name whatever argument list the caller's header
// declares; none of them reads an argument. They sit in an archive linked last: a tree that defines
// or never calls them (upstream llama.cpp without GGML_USE_LLAMAFILE) pulls none of them in.
#include <cstddef>

struct ggml_compute_params;
struct ggml_tensor;

extern "C" {

bool llamafile_sgemm(const ggml_compute_params *, long, long, long, const void *, long, const void *, long, void *,
                     long, int, int, int) {
    return false;
}

bool llamafile_mixmul(const ggml_compute_params *, const ggml_tensor *, const ggml_tensor *, const ggml_tensor *,
                      ggml_tensor *) {
    return false;
}

size_t llamafile_mixmul_needs(const ggml_tensor *, const ggml_tensor *, const ggml_tensor *) {
    return 0;
}

}  // extern "C"
