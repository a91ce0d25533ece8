/* An LD_PRELOAD spy for TestProtectionFlagsPerTransport: reports the
 * protection each ucp_mem_map call carries, then calls the real function.
 * It proves what the binding passes; UCX itself does the mapping. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <ucp/api/ucp.h>

typedef ucs_status_t (*mem_map_fn)(ucp_context_h, const ucp_mem_map_params_t *,
                                   ucp_mem_h *);

ucs_status_t ucp_mem_map(ucp_context_h context,
                         const ucp_mem_map_params_t *params, ucp_mem_h *memh_p)
{
    static mem_map_fn real;
    size_t length = 0;

    if (real == NULL) {
        real = (mem_map_fn)dlsym(RTLD_NEXT, "ucp_mem_map");
    }
    if (params->field_mask & UCP_MEM_MAP_PARAM_FIELD_LENGTH) {
        length = params->length;
    }
    if (params->field_mask & UCP_MEM_MAP_PARAM_FIELD_PROT) {
        fprintf(stderr, "protspy: length %zu prot 0x%x\n", length, params->prot);
    } else {
        fprintf(stderr, "protspy: length %zu prot unset\n", length);
    }
    return real(context, params, memh_p);
}
