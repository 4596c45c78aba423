// A function with no section of its own lands in .text: a subprogram,
// never an entry, so the object has no entry point.
#include "nearstore.h"

unsigned int lookup(struct bpf_xrp *context)
{
	context->done = 1;
	return 0;
}
