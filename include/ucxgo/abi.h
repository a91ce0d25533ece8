/*
 * ucx-go: build-time UCX version guard and the run-time ABI selection.
 * Any UCX from 1.16 to 1.23 builds; the shims then choose the UCT v2
 * layouts from the release loaded at run time (ucxgo_abi), since one
 * binary may meet any of them under the same soname. Other releases stop
 * the build here with one line (unsupported.h).
 */
#ifndef UCXGO_ABI_H
#define UCXGO_ABI_H

#include <ucp/api/ucp_version.h>
#include <uct/api/version.h>

#define UCXGO_OLDEST_MINOR          16
#define UCXGO_NEWEST_VERIFIED_MINOR 23

#if UCT_VERNO_MAJOR != 1 || UCT_VERNO_MINOR < UCXGO_OLDEST_MINOR || \
    (UCT_VERNO_MINOR > UCXGO_NEWEST_VERIFIED_MINOR && !defined(UCXGO_ALLOW_UNVERIFIED_UCX))
#  define UCXGO_UNSUPPORTED 1
#  include "unsupported.h"
#else
#  include "uct_v2.h"
#endif

#endif
