/* One #error per UCX minor release outside 1.16-1.23: #error prints its
 * text verbatim and cannot show a macro's value, so the version found is
 * spelled out. Releases newer than the newest verified one (1.23) build
 * only with the build tag ucxgo_unverified_ucx, at the user's risk. */
#if UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 0
#  error "ucx-go: found UCX 1.0, which has no exported-mkey API; supported: UCX 1.16 to 1.23; install one (the README lists who ships each) or run make test, which provisions Debian trixie UCX 1.18.1"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 1
#  error "ucx-go: found UCX 1.1, which has no exported-mkey API; supported: UCX 1.16 to 1.23; install one (the README lists who ships each) or run make test, which provisions Debian trixie UCX 1.18.1"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 2
#  error "ucx-go: found UCX 1.2, which has no exported-mkey API; supported: UCX 1.16 to 1.23; install one (the README lists who ships each) or run make test, which provisions Debian trixie UCX 1.18.1"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 3
#  error "ucx-go: found UCX 1.3, which has no exported-mkey API; supported: UCX 1.16 to 1.23; install one (the README lists who ships each) or run make test, which provisions Debian trixie UCX 1.18.1"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 4
#  error "ucx-go: found UCX 1.4, which has no exported-mkey API; supported: UCX 1.16 to 1.23; install one (the README lists who ships each) or run make test, which provisions Debian trixie UCX 1.18.1"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 5
#  error "ucx-go: found UCX 1.5, which has no exported-mkey API; supported: UCX 1.16 to 1.23; install one (the README lists who ships each) or run make test, which provisions Debian trixie UCX 1.18.1"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 6
#  error "ucx-go: found UCX 1.6, which has no exported-mkey API; supported: UCX 1.16 to 1.23; install one (the README lists who ships each) or run make test, which provisions Debian trixie UCX 1.18.1"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 7
#  error "ucx-go: found UCX 1.7, which has no exported-mkey API; supported: UCX 1.16 to 1.23; install one (the README lists who ships each) or run make test, which provisions Debian trixie UCX 1.18.1"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 8
#  error "ucx-go: found UCX 1.8, which has no exported-mkey API; supported: UCX 1.16 to 1.23; install one (the README lists who ships each) or run make test, which provisions Debian trixie UCX 1.18.1"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 9
#  error "ucx-go: found UCX 1.9, which has no exported-mkey API; supported: UCX 1.16 to 1.23; install one (the README lists who ships each) or run make test, which provisions Debian trixie UCX 1.18.1"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 10
#  error "ucx-go: found UCX 1.10, which has no exported-mkey API; supported: UCX 1.16 to 1.23; install one (the README lists who ships each) or run make test, which provisions Debian trixie UCX 1.18.1"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 11
#  error "ucx-go: found UCX 1.11, which has no exported-mkey API; supported: UCX 1.16 to 1.23; install one (the README lists who ships each) or run make test, which provisions Debian trixie UCX 1.18.1"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 12
#  error "ucx-go: found UCX 1.12, which has no exported-mkey API; supported: UCX 1.16 to 1.23; install one (the README lists who ships each) or run make test, which provisions Debian trixie UCX 1.18.1"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 13
#  error "ucx-go: found UCX 1.13, which has no exported-mkey API; supported: UCX 1.16 to 1.23; install one (the README lists who ships each) or run make test, which provisions Debian trixie UCX 1.18.1"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 14
#  error "ucx-go: found UCX 1.14, which declares the exported-memh API but does not implement it; supported: UCX 1.16 to 1.23; install one (the README lists who ships each) or run make test, which provisions Debian trixie UCX 1.18.1"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 15
#  error "ucx-go: found UCX 1.15, whose exported-mkey payload later releases cannot read and whose uct_md_mkey_pack_v2 has four parameters; supported: UCX 1.16 to 1.23; install one (the README lists who ships each) or run make test, which provisions Debian trixie UCX 1.18.1"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 24
#  error "ucx-go: found UCX 1.24, newer than 1.23, the newest release verified; build with -tags ucxgo_unverified_ucx to use it at your own risk (the 1.22 layouts are assumed), or install UCX 1.16 to 1.23"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 25
#  error "ucx-go: found UCX 1.25, newer than 1.23, the newest release verified; build with -tags ucxgo_unverified_ucx to use it at your own risk (the 1.22 layouts are assumed), or install UCX 1.16 to 1.23"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 26
#  error "ucx-go: found UCX 1.26, newer than 1.23, the newest release verified; build with -tags ucxgo_unverified_ucx to use it at your own risk (the 1.22 layouts are assumed), or install UCX 1.16 to 1.23"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 27
#  error "ucx-go: found UCX 1.27, newer than 1.23, the newest release verified; build with -tags ucxgo_unverified_ucx to use it at your own risk (the 1.22 layouts are assumed), or install UCX 1.16 to 1.23"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 28
#  error "ucx-go: found UCX 1.28, newer than 1.23, the newest release verified; build with -tags ucxgo_unverified_ucx to use it at your own risk (the 1.22 layouts are assumed), or install UCX 1.16 to 1.23"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 29
#  error "ucx-go: found UCX 1.29, newer than 1.23, the newest release verified; build with -tags ucxgo_unverified_ucx to use it at your own risk (the 1.22 layouts are assumed), or install UCX 1.16 to 1.23"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 30
#  error "ucx-go: found UCX 1.30, newer than 1.23, the newest release verified; build with -tags ucxgo_unverified_ucx to use it at your own risk (the 1.22 layouts are assumed), or install UCX 1.16 to 1.23"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 31
#  error "ucx-go: found UCX 1.31, newer than 1.23, the newest release verified; build with -tags ucxgo_unverified_ucx to use it at your own risk (the 1.22 layouts are assumed), or install UCX 1.16 to 1.23"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 32
#  error "ucx-go: found UCX 1.32, newer than 1.23, the newest release verified; build with -tags ucxgo_unverified_ucx to use it at your own risk (the 1.22 layouts are assumed), or install UCX 1.16 to 1.23"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 33
#  error "ucx-go: found UCX 1.33, newer than 1.23, the newest release verified; build with -tags ucxgo_unverified_ucx to use it at your own risk (the 1.22 layouts are assumed), or install UCX 1.16 to 1.23"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 34
#  error "ucx-go: found UCX 1.34, newer than 1.23, the newest release verified; build with -tags ucxgo_unverified_ucx to use it at your own risk (the 1.22 layouts are assumed), or install UCX 1.16 to 1.23"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 35
#  error "ucx-go: found UCX 1.35, newer than 1.23, the newest release verified; build with -tags ucxgo_unverified_ucx to use it at your own risk (the 1.22 layouts are assumed), or install UCX 1.16 to 1.23"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 36
#  error "ucx-go: found UCX 1.36, newer than 1.23, the newest release verified; build with -tags ucxgo_unverified_ucx to use it at your own risk (the 1.22 layouts are assumed), or install UCX 1.16 to 1.23"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 37
#  error "ucx-go: found UCX 1.37, newer than 1.23, the newest release verified; build with -tags ucxgo_unverified_ucx to use it at your own risk (the 1.22 layouts are assumed), or install UCX 1.16 to 1.23"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 38
#  error "ucx-go: found UCX 1.38, newer than 1.23, the newest release verified; build with -tags ucxgo_unverified_ucx to use it at your own risk (the 1.22 layouts are assumed), or install UCX 1.16 to 1.23"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 39
#  error "ucx-go: found UCX 1.39, newer than 1.23, the newest release verified; build with -tags ucxgo_unverified_ucx to use it at your own risk (the 1.22 layouts are assumed), or install UCX 1.16 to 1.23"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 40
#  error "ucx-go: found UCX 1.40, newer than 1.23, the newest release verified; build with -tags ucxgo_unverified_ucx to use it at your own risk (the 1.22 layouts are assumed), or install UCX 1.16 to 1.23"
#else
#  error "ucx-go: found a UCX release this guard does not know (not 1.0 to 1.40); supported: UCX 1.16 to 1.23; install one (the README lists who ships each) or run make test, which provisions Debian trixie UCX 1.18.1"
#endif
