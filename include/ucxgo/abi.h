/*
 * ucx-go: build-time UCX version guard and selection of the UCT v2
 * declarations. Debian (like every distribution) does not install
 * uct/api/v2/uct_v2.h and its layouts change between releases, so the
 * binding declares the v2 types itself (uct_v2.h), for the verified releases.
 * Any other release stops the build here with one line.
 */
#ifndef UCXGO_ABI_H
#define UCXGO_ABI_H

#include <ucp/api/ucp_version.h>
#include <uct/api/version.h>


#if UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 18
#  define UCXGO_UCT_MINOR 18
#  include "uct_v2.h"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 23
#  define UCXGO_UCT_MINOR 23
#  include "uct_v2.h"
#else
#  define UCXGO_UNSUPPORTED 1
#  include "unsupported.h"
#endif

#endif
