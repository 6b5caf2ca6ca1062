/*
** fake.h -- the image format shared by the fake NVRTC and the fake CUDA
** driver (tests only): a "cubin" is this magic line followed by the CUDA C
** source, NUL-terminated. The driver compiles the source for the host
** (hostrun.h) when the image is loaded.
*/
#ifndef TC_FAKE_H
#define TC_FAKE_H

#define FAKE_IMAGE_MAGIC "TC-FAKE-CUBIN 1\n"

#include "../devtag.h"   /* device addresses are tagged host addresses */

#endif
