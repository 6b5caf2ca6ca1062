/*
** devtag.h -- the fake driver's device addresses (tests only): host memory
** with this bit set, a non-canonical address on x86-64, so that a load or
** store through a device pointer on the host faults, as it would on a real
** GPU, instead of quietly working. The fake's own entry points and a
** kernel's host entry (render.c: TCK_HOST_PTR) clear it; host pointers
** (hostexec) do not have it.
*/
#ifndef TC_DEVTAG_H
#define TC_DEVTAG_H

#include <stdint.h>

#define TCK_DEVICE_TAG (UINT64_C(1) << 52)
#define TCK_HOST_PTR(p) ((char *)(uintptr_t)((uint64_t)(uintptr_t)(p) & \
                                             ~TCK_DEVICE_TAG))

#endif
