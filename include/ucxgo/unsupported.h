/* One #error per UCX minor release: #error prints its text verbatim and
 * cannot show a macro's value, so the version found is spelled out. */
#if UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 0
#  error "ucx-go: found UCX 1.0, which has no exported-mkey API; supported: UCX 1.18.x and 1.23.x; provision one with: make test (runs in a cached Debian trixie root filesystem; UCX_SUITE=forky for 1.23)"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 1
#  error "ucx-go: found UCX 1.1, which has no exported-mkey API; supported: UCX 1.18.x and 1.23.x; provision one with: make test (runs in a cached Debian trixie root filesystem; UCX_SUITE=forky for 1.23)"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 2
#  error "ucx-go: found UCX 1.2, which has no exported-mkey API; supported: UCX 1.18.x and 1.23.x; provision one with: make test (runs in a cached Debian trixie root filesystem; UCX_SUITE=forky for 1.23)"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 3
#  error "ucx-go: found UCX 1.3, which has no exported-mkey API; supported: UCX 1.18.x and 1.23.x; provision one with: make test (runs in a cached Debian trixie root filesystem; UCX_SUITE=forky for 1.23)"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 4
#  error "ucx-go: found UCX 1.4, which has no exported-mkey API; supported: UCX 1.18.x and 1.23.x; provision one with: make test (runs in a cached Debian trixie root filesystem; UCX_SUITE=forky for 1.23)"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 5
#  error "ucx-go: found UCX 1.5, which has no exported-mkey API; supported: UCX 1.18.x and 1.23.x; provision one with: make test (runs in a cached Debian trixie root filesystem; UCX_SUITE=forky for 1.23)"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 6
#  error "ucx-go: found UCX 1.6, which has no exported-mkey API; supported: UCX 1.18.x and 1.23.x; provision one with: make test (runs in a cached Debian trixie root filesystem; UCX_SUITE=forky for 1.23)"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 7
#  error "ucx-go: found UCX 1.7, which has no exported-mkey API; supported: UCX 1.18.x and 1.23.x; provision one with: make test (runs in a cached Debian trixie root filesystem; UCX_SUITE=forky for 1.23)"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 8
#  error "ucx-go: found UCX 1.8, which has no exported-mkey API; supported: UCX 1.18.x and 1.23.x; provision one with: make test (runs in a cached Debian trixie root filesystem; UCX_SUITE=forky for 1.23)"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 9
#  error "ucx-go: found UCX 1.9, which has no exported-mkey API; supported: UCX 1.18.x and 1.23.x; provision one with: make test (runs in a cached Debian trixie root filesystem; UCX_SUITE=forky for 1.23)"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 10
#  error "ucx-go: found UCX 1.10, which has no exported-mkey API; supported: UCX 1.18.x and 1.23.x; provision one with: make test (runs in a cached Debian trixie root filesystem; UCX_SUITE=forky for 1.23)"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 11
#  error "ucx-go: found UCX 1.11, which has no exported-mkey API; supported: UCX 1.18.x and 1.23.x; provision one with: make test (runs in a cached Debian trixie root filesystem; UCX_SUITE=forky for 1.23)"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 12
#  error "ucx-go: found UCX 1.12, which has no exported-mkey API; supported: UCX 1.18.x and 1.23.x; provision one with: make test (runs in a cached Debian trixie root filesystem; UCX_SUITE=forky for 1.23)"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 13
#  error "ucx-go: found UCX 1.13, which has no exported-mkey API; supported: UCX 1.18.x and 1.23.x; provision one with: make test (runs in a cached Debian trixie root filesystem; UCX_SUITE=forky for 1.23)"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 14
#  error "ucx-go: found UCX 1.14, which declares the exported-memh API but does not implement it; supported: UCX 1.18.x and 1.23.x; provision one with: make test (runs in a cached Debian trixie root filesystem; UCX_SUITE=forky for 1.23)"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 15
#  error "ucx-go: found UCX 1.15, whose UCT v2 layouts this binding has not verified; supported: UCX 1.18.x and 1.23.x; provision one with: make test (runs in a cached Debian trixie root filesystem; UCX_SUITE=forky for 1.23)"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 16
#  error "ucx-go: found UCX 1.16, whose UCT v2 layouts this binding has not verified; supported: UCX 1.18.x and 1.23.x; provision one with: make test (runs in a cached Debian trixie root filesystem; UCX_SUITE=forky for 1.23)"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 17
#  error "ucx-go: found UCX 1.17, whose UCT v2 layouts this binding has not verified; supported: UCX 1.18.x and 1.23.x; provision one with: make test (runs in a cached Debian trixie root filesystem; UCX_SUITE=forky for 1.23)"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 19
#  error "ucx-go: found UCX 1.19, whose UCT v2 layouts this binding has not verified; supported: UCX 1.18.x and 1.23.x; provision one with: make test (runs in a cached Debian trixie root filesystem; UCX_SUITE=forky for 1.23)"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 20
#  error "ucx-go: found UCX 1.20, whose UCT v2 layouts this binding has not verified; supported: UCX 1.18.x and 1.23.x; provision one with: make test (runs in a cached Debian trixie root filesystem; UCX_SUITE=forky for 1.23)"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 21
#  error "ucx-go: found UCX 1.21, whose UCT v2 layouts this binding has not verified; supported: UCX 1.18.x and 1.23.x; provision one with: make test (runs in a cached Debian trixie root filesystem; UCX_SUITE=forky for 1.23)"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 22
#  error "ucx-go: found UCX 1.22, whose UCT v2 layouts this binding has not verified; supported: UCX 1.18.x and 1.23.x; provision one with: make test (runs in a cached Debian trixie root filesystem; UCX_SUITE=forky for 1.23)"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 24
#  error "ucx-go: found UCX 1.24, whose UCT v2 layouts this binding has not verified; supported: UCX 1.18.x and 1.23.x; provision one with: make test (runs in a cached Debian trixie root filesystem; UCX_SUITE=forky for 1.23)"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 25
#  error "ucx-go: found UCX 1.25, whose UCT v2 layouts this binding has not verified; supported: UCX 1.18.x and 1.23.x; provision one with: make test (runs in a cached Debian trixie root filesystem; UCX_SUITE=forky for 1.23)"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 26
#  error "ucx-go: found UCX 1.26, whose UCT v2 layouts this binding has not verified; supported: UCX 1.18.x and 1.23.x; provision one with: make test (runs in a cached Debian trixie root filesystem; UCX_SUITE=forky for 1.23)"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 27
#  error "ucx-go: found UCX 1.27, whose UCT v2 layouts this binding has not verified; supported: UCX 1.18.x and 1.23.x; provision one with: make test (runs in a cached Debian trixie root filesystem; UCX_SUITE=forky for 1.23)"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 28
#  error "ucx-go: found UCX 1.28, whose UCT v2 layouts this binding has not verified; supported: UCX 1.18.x and 1.23.x; provision one with: make test (runs in a cached Debian trixie root filesystem; UCX_SUITE=forky for 1.23)"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 29
#  error "ucx-go: found UCX 1.29, whose UCT v2 layouts this binding has not verified; supported: UCX 1.18.x and 1.23.x; provision one with: make test (runs in a cached Debian trixie root filesystem; UCX_SUITE=forky for 1.23)"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 30
#  error "ucx-go: found UCX 1.30, whose UCT v2 layouts this binding has not verified; supported: UCX 1.18.x and 1.23.x; provision one with: make test (runs in a cached Debian trixie root filesystem; UCX_SUITE=forky for 1.23)"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 31
#  error "ucx-go: found UCX 1.31, whose UCT v2 layouts this binding has not verified; supported: UCX 1.18.x and 1.23.x; provision one with: make test (runs in a cached Debian trixie root filesystem; UCX_SUITE=forky for 1.23)"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 32
#  error "ucx-go: found UCX 1.32, whose UCT v2 layouts this binding has not verified; supported: UCX 1.18.x and 1.23.x; provision one with: make test (runs in a cached Debian trixie root filesystem; UCX_SUITE=forky for 1.23)"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 33
#  error "ucx-go: found UCX 1.33, whose UCT v2 layouts this binding has not verified; supported: UCX 1.18.x and 1.23.x; provision one with: make test (runs in a cached Debian trixie root filesystem; UCX_SUITE=forky for 1.23)"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 34
#  error "ucx-go: found UCX 1.34, whose UCT v2 layouts this binding has not verified; supported: UCX 1.18.x and 1.23.x; provision one with: make test (runs in a cached Debian trixie root filesystem; UCX_SUITE=forky for 1.23)"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 35
#  error "ucx-go: found UCX 1.35, whose UCT v2 layouts this binding has not verified; supported: UCX 1.18.x and 1.23.x; provision one with: make test (runs in a cached Debian trixie root filesystem; UCX_SUITE=forky for 1.23)"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 36
#  error "ucx-go: found UCX 1.36, whose UCT v2 layouts this binding has not verified; supported: UCX 1.18.x and 1.23.x; provision one with: make test (runs in a cached Debian trixie root filesystem; UCX_SUITE=forky for 1.23)"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 37
#  error "ucx-go: found UCX 1.37, whose UCT v2 layouts this binding has not verified; supported: UCX 1.18.x and 1.23.x; provision one with: make test (runs in a cached Debian trixie root filesystem; UCX_SUITE=forky for 1.23)"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 38
#  error "ucx-go: found UCX 1.38, whose UCT v2 layouts this binding has not verified; supported: UCX 1.18.x and 1.23.x; provision one with: make test (runs in a cached Debian trixie root filesystem; UCX_SUITE=forky for 1.23)"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 39
#  error "ucx-go: found UCX 1.39, whose UCT v2 layouts this binding has not verified; supported: UCX 1.18.x and 1.23.x; provision one with: make test (runs in a cached Debian trixie root filesystem; UCX_SUITE=forky for 1.23)"
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 40
#  error "ucx-go: found UCX 1.40, whose UCT v2 layouts this binding has not verified; supported: UCX 1.18.x and 1.23.x; provision one with: make test (runs in a cached Debian trixie root filesystem; UCX_SUITE=forky for 1.23)"
#else
#  error "ucx-go: found an unknown UCX release; supported: UCX 1.18.x and 1.23.x; provision one with: make test (runs in a cached Debian trixie root filesystem; UCX_SUITE=forky for 1.23)"
#endif
