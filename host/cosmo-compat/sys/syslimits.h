/* For llama.cpp checkouts (LLAMACPP=) on cosmocc: cosmopolitan's normalize.inc undefines __linux__ on every
 * compile, so code that picks <linux/limits.h> on Linux takes its BSD branch, <sys/syslimits.h>, which
 * cosmopolitan does not have. PATH_MAX and the other limits are in <limits.h> there. */
#include <limits.h>
