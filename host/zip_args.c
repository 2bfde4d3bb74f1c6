/* The .args of a llamafile built from a llama.cpp checkout (LLAMACPP=).
 *
 * llamafile's own main reads /zip/.args with cosmo_args; llama.cpp's server does not. The checkout's server is
 * linked with -Wl,--wrap=main (opencoti_build.tree.host_tree): the runtime's call to main reaches this function,
 * which puts the artifact's .args before the user's arguments (a lone `...` in it marks where they go, as in
 * llamafile), then runs the server's own main. Without cosmopolitan's <cosmo.h> (the gcc stand-in, which has no
 * /zip/ file system) the arguments pass through unchanged. */
#if __has_include(<cosmo.h>)
#include <cosmo.h>
#endif

int __real_main(int argc, char **argv, char **envp);

int __wrap_main(int argc, char **argv, char **envp) {
#if __has_include(<cosmo.h>)
    int with_args = cosmo_args("/zip/.args", &argv);
    if (with_args != -1)
        argc = with_args;
#endif
    return __real_main(argc, argv, envp);
}
