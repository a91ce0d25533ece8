/* C side of the UCT shims declared in include/ucxgo/shim.h. */
#include "ucxgo/shim.h"

#include <ctype.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

void ucxgo_built_version(unsigned *major, unsigned *minor, unsigned *patch)
{
    *major = UCT_VERNO_MAJOR;
    *minor = UCT_VERNO_MINOR;
    *patch = UCT_VERNO_PATCH;
}

#define UCXGO_FIELD(_layout, _bit, _field) \
    { UCXGO_MD_ATTR_##_bit, offsetof(ucxgo_md_attr_v2_##_layout##_t, _field), \
      sizeof(((ucxgo_md_attr_v2_##_layout##_t *)0)->_field), #_field, \
      offsetof(ucxgo_md_attr_t, _field) }

/* The fields every layout has, in two runs around gva_mem_types. */
#define UCXGO_FIELDS_HEAD(_l) \
    UCXGO_FIELD(_l, MAX_ALLOC, max_alloc), \
    UCXGO_FIELD(_l, MAX_REG, max_reg), \
    UCXGO_FIELD(_l, FLAGS, flags), \
    UCXGO_FIELD(_l, REG_MEM_TYPES, reg_mem_types), \
    UCXGO_FIELD(_l, REG_NONBLOCK_MEM_TYPES, reg_nonblock_mem_types), \
    UCXGO_FIELD(_l, CACHE_MEM_TYPES, cache_mem_types)
#define UCXGO_FIELDS_REST(_l) \
    UCXGO_FIELD(_l, DETECT_MEM_TYPES, detect_mem_types), \
    UCXGO_FIELD(_l, ALLOC_MEM_TYPES, alloc_mem_types), \
    UCXGO_FIELD(_l, ACCESS_MEM_TYPES, access_mem_types), \
    UCXGO_FIELD(_l, DMABUF_MEM_TYPES, dmabuf_mem_types), \
    UCXGO_FIELD(_l, REG_COST, reg_cost), \
    UCXGO_FIELD(_l, COMPONENT_NAME, component_name), \
    UCXGO_FIELD(_l, RKEY_PACKED_SIZE, rkey_packed_size), \
    UCXGO_FIELD(_l, LOCAL_CPUS, local_cpus), \
    UCXGO_FIELD(_l, EXPORTED_MKEY_PACKED_SIZE, exported_mkey_packed_size), \
    UCXGO_FIELD(_l, GLOBAL_ID, global_id), \
    UCXGO_FIELD(_l, REG_ALIGNMENT, reg_alignment)

static const ucxgo_field_layout_t ucxgo_md_attr_1_16[] = {
    UCXGO_FIELDS_HEAD(1_16), UCXGO_FIELDS_REST(1_16)
};
static const ucxgo_field_layout_t ucxgo_md_attr_1_18[] = {
    UCXGO_FIELDS_HEAD(1_18), UCXGO_FIELD(1_18, GVA_MEM_TYPES, gva_mem_types),
    UCXGO_FIELDS_REST(1_18)
};
static const ucxgo_field_layout_t ucxgo_md_attr_1_22[] = {
    UCXGO_FIELDS_HEAD(1_22), UCXGO_FIELD(1_22, GVA_MEM_TYPES, gva_mem_types),
    UCXGO_FIELDS_REST(1_22),
    UCXGO_FIELD(1_22, REQUIRED_MEM_FLAGS, required_mem_flags)
};

/* A field is copied whole into ucxgo_md_attr_t: never into less room. */
#define UCXGO_ROOM(_f) \
    _Static_assert(sizeof(((ucxgo_md_attr_v2_1_22_t *)0)->_f) <= \
                   sizeof(((ucxgo_md_attr_t *)0)->_f), #_f)
UCXGO_ROOM(max_reg); UCXGO_ROOM(reg_cost); UCXGO_ROOM(component_name);
UCXGO_ROOM(rkey_packed_size); UCXGO_ROOM(local_cpus);
UCXGO_ROOM(exported_mkey_packed_size); UCXGO_ROOM(global_id);
UCXGO_ROOM(reg_alignment); UCXGO_ROOM(required_mem_flags);

#define UCXGO_COUNT(_a) (sizeof(_a) / sizeof((_a)[0]))

static ucxgo_abi_t ucxgo_abi_loaded;
static pthread_once_t ucxgo_abi_once = PTHREAD_ONCE_INIT;

static void ucxgo_abi_init(void)
{
    ucxgo_abi_t *abi = &ucxgo_abi_loaded;
    unsigned i;

    ucp_get_version(&abi->major, &abi->minor, &abi->patch);
    abi->supported = (abi->major == 1) && (abi->minor >= UCXGO_OLDEST_MINOR);
#ifndef UCXGO_ALLOW_UNVERIFIED_UCX
    abi->supported = abi->supported &&
                     (abi->minor <= UCXGO_NEWEST_VERIFIED_MINOR);
#endif
    if (abi->minor >= 22) {
        abi->md_attr_since   = 22;
        abi->md_attr_size    = sizeof(ucxgo_md_attr_v2_1_22_t);
        abi->md_attr_fields  = ucxgo_md_attr_1_22;
        abi->md_attr_nfields = UCXGO_COUNT(ucxgo_md_attr_1_22);
    } else if (abi->minor >= 18) {
        abi->md_attr_since   = 18;
        abi->md_attr_size    = sizeof(ucxgo_md_attr_v2_1_18_t);
        abi->md_attr_fields  = ucxgo_md_attr_1_18;
        abi->md_attr_nfields = UCXGO_COUNT(ucxgo_md_attr_1_18);
    } else {
        abi->md_attr_since   = 16;
        abi->md_attr_size    = sizeof(ucxgo_md_attr_v2_1_16_t);
        abi->md_attr_fields  = ucxgo_md_attr_1_16;
        abi->md_attr_nfields = UCXGO_COUNT(ucxgo_md_attr_1_16);
    }
    for (i = 0; i < abi->md_attr_nfields; ++i) {
        abi->md_attr_mask |= abi->md_attr_fields[i].bit;
    }
    abi->attach_mkey_size = abi->minor >= 19;
}

const ucxgo_abi_t *ucxgo_abi(void)
{
    pthread_once(&ucxgo_abi_once, ucxgo_abi_init);
    return &ucxgo_abi_loaded;
}

ucs_status_t ucxgo_components(uct_component_h **list, unsigned *count)
{
    return uct_query_components(list, count);
}

ucs_status_t ucxgo_component_query(uct_component_h component,
                                   ucxgo_component_info_t *info)
{
    uct_component_attr_t attr;
    ucs_status_t status;
    unsigned i, n;

    memset(info, 0, sizeof(*info));
    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME |
                      UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT |
                      UCT_COMPONENT_ATTR_FIELD_FLAGS;
    status = uct_component_query(component, &attr);
    if (status != UCS_OK) {
        return status;
    }
    memcpy(info->name, attr.name, UCT_COMPONENT_NAME_MAX);
    info->flags    = attr.flags;
    info->md_count = attr.md_resource_count;
    if (attr.md_resource_count == 0) {
        return UCS_OK;
    }

    attr.md_resources = calloc(attr.md_resource_count, sizeof(*attr.md_resources));
    if (attr.md_resources == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
    status = uct_component_query(component, &attr);
    if (status == UCS_OK) {
        n = attr.md_resource_count;
        if (n > UCXGO_MAX_MDS_PER_COMPONENT) {
            n = UCXGO_MAX_MDS_PER_COMPONENT;
        }
        for (i = 0; i < n; ++i) {
            memcpy(info->md_names[i], attr.md_resources[i].md_name, UCT_MD_NAME_MAX);
        }
    }
    free(attr.md_resources);
    return status;
}

ucs_status_t ucxgo_apply_config(void *config, const char *kv, unsigned kv_count,
                                ucs_status_t (*modify)(void *, const char *, const char *),
                                const char *prefix, unsigned *failed_kv)
{
    const char *key = kv, *value;
    size_t n        = strlen(prefix);
    ucs_status_t status;
    unsigned i;

    for (i = 0; i < kv_count; ++i) {
        value  = key + strlen(key) + 1;
        status = modify(config, key, value);
        if ((status == UCS_ERR_NO_ELEM) && (n > 0) &&
            (strncmp(key, prefix, n) == 0)) {
            status = modify(config, key + n, value);
        }
        if (status != UCS_OK) {
            *failed_kv = i;
            return status;
        }
        key = value + strlen(value) + 1;
    }
    return UCS_OK;
}

static ucs_status_t ucxgo_md_config_modify(void *config, const char *name,
                                           const char *value)
{
    return uct_config_modify(config, name, value);
}

/* UCX 1.16's MD configuration takes names without the component's prefix
 * (DIR), 1.17 and later with it (POSIX_DIR): the prefix is dropped when the
 * name as given is unknown. */
ucs_status_t ucxgo_md_open(uct_component_h component, const char *md_name,
                           const char *kv, unsigned kv_count, uct_md_h *md_p,
                           unsigned *failed_kv)
{
    uct_component_attr_t attr;
    char prefix[UCT_COMPONENT_NAME_MAX + 2] = "";
    uct_md_config_t *config;
    ucs_status_t status;
    unsigned i;
    size_t n;

    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME;
    if ((kv_count > 0) && (uct_component_query(component, &attr) == UCS_OK)) {
        n = strnlen(attr.name, UCT_COMPONENT_NAME_MAX);
        for (i = 0; i < n; ++i) {
            prefix[i] = toupper((unsigned char)attr.name[i]);
        }
        prefix[n]     = '_';
        prefix[n + 1] = '\0';
    }

    status = uct_md_config_read(component, NULL, NULL, &config);
    if (status != UCS_OK) {
        return status;
    }
    status = ucxgo_apply_config(config, kv, kv_count, ucxgo_md_config_modify,
                                prefix, failed_kv);
    if (status == UCS_OK) {
        status = uct_md_open(component, md_name, config, md_p);
    }
    uct_config_release(config);
    return status;
}

/* Room for the largest layout, aligned for its fields. */
typedef union ucxgo_md_attr_v2_buf {
    ucxgo_md_attr_v2_1_16_t v1_16;
    ucxgo_md_attr_v2_1_18_t v1_18;
    ucxgo_md_attr_v2_1_22_t v1_22;
} ucxgo_md_attr_v2_buf_t;

ucs_status_t ucxgo_md_query(uct_md_h md, ucxgo_md_attr_t *out)
{
    const ucxgo_abi_t *abi = ucxgo_abi();
    const ucxgo_field_layout_t *f;
    ucxgo_md_attr_v2_buf_t buf;
    ucs_status_t status;
    unsigned i;

    memset(out, 0, sizeof(*out));
    if (!abi->supported) {
        return UCS_ERR_UNSUPPORTED;
    }
    memset(&buf, 0, sizeof(buf));
    buf.v1_16.field_mask = abi->md_attr_mask;
    status = uct_md_query_v2(md, &buf);
    if (status != UCS_OK) {
        return status;
    }
    for (i = 0; i < abi->md_attr_nfields; ++i) {
        f = &abi->md_attr_fields[i];
        memcpy((char *)out + f->copy_offset, (char *)&buf + f->offset, f->size);
    }
    return UCS_OK;
}

ucs_status_t ucxgo_md_query_v1(uct_md_h md, ucxgo_md_attr_t *out)
{
    uct_md_attr_t attr;
    ucs_status_t status;

    memset(&attr, 0, sizeof(attr));
    memset(out, 0, sizeof(*out));
    status = uct_md_query(md, &attr);
    if (status != UCS_OK) {
        return status;
    }
    out->max_alloc        = attr.cap.max_alloc;
    out->max_reg          = attr.cap.max_reg;
    out->flags            = attr.cap.flags;
    out->reg_mem_types    = attr.cap.reg_mem_types;
    out->detect_mem_types = attr.cap.detect_mem_types;
    out->alloc_mem_types  = attr.cap.alloc_mem_types;
    out->access_mem_types = attr.cap.access_mem_types;
    out->reg_cost         = attr.reg_cost;
    out->rkey_packed_size = attr.rkey_packed_size;
    out->local_cpus       = attr.local_cpus;
    memcpy(out->component_name, attr.component_name, UCT_COMPONENT_NAME_MAX);
    return UCS_OK;
}

ucs_status_t ucxgo_md_query_raw(uct_md_h md, uint64_t field_mask, void *buf)
{
    if (!ucxgo_abi()->supported) {
        return UCS_ERR_UNSUPPORTED;
    }
    *(uint64_t *)buf = field_mask;
    return uct_md_query_v2(md, buf);
}

ucxgo_result_t ucxgo_mem_reg(uct_md_h md, void *address, size_t length,
                             uint64_t flags)
{
    ucxgo_uct_md_mem_reg_params_t params;
    ucxgo_result_t r = {0};
    uct_mem_h memh   = NULL;

    memset(&params, 0, sizeof(params));
    params.field_mask = UCXGO_MEM_REG_FIELD_FLAGS;
    params.flags      = flags;
    r.status = uct_md_mem_reg_v2(md, address, length, &params, &memh);
    r.handle = memh;
    return r;
}

ucs_status_t ucxgo_mem_dereg(uct_md_h md, uct_mem_h memh)
{
    ucxgo_uct_md_mem_dereg_params_t params;

    memset(&params, 0, sizeof(params));
    params.field_mask = UCXGO_MEM_DEREG_FIELD_MEMH;
    params.memh       = memh;
    return uct_md_mem_dereg_v2(md, &params);
}

ucs_status_t ucxgo_mem_alloc(uct_md_h md, size_t length, unsigned flags,
                             ucxgo_allocated_memory_t *mem)
{
    uct_alloc_method_t method = UCT_ALLOC_METHOD_MD;
    uct_mem_alloc_params_t params;

    memset(&params, 0, sizeof(params));
    params.field_mask = UCT_MEM_ALLOC_PARAM_FIELD_FLAGS |
                        UCT_MEM_ALLOC_PARAM_FIELD_MEM_TYPE |
                        UCT_MEM_ALLOC_PARAM_FIELD_MDS |
                        UCT_MEM_ALLOC_PARAM_FIELD_NAME;
    params.flags      = flags;
    params.mem_type   = UCS_MEMORY_TYPE_HOST;
    params.mds.mds    = &md;
    params.mds.count  = 1;
    params.name       = "ucx-go";
    return uct_mem_alloc(length, &method, 1, &params, &mem->mem);
}

ucs_status_t ucxgo_mem_free(ucxgo_allocated_memory_t *mem)
{
    return uct_mem_free(&mem->mem);
}

/* Guard bytes after the packed key; UCX writing into them is an overrun. */
#define UCXGO_PACK_GUARD   256
#define UCXGO_PACK_SCRATCH 1024
#define UCXGO_GUARD_BYTE   0xa5

/* Runs one pack into a guarded scratch area, then copies out_size bytes. */
static ucs_status_t ucxgo_guarded_pack(uct_md_h md, uct_mem_h memh,
                                       void *address, size_t length,
                                       int export_key, int v1, void *out,
                                       size_t out_size, int *overrun)
{
    ucxgo_uct_md_mkey_pack_params_t params;
    uint8_t stack_buf[UCXGO_PACK_SCRATCH];
    uint8_t *scratch = stack_buf;
    size_t total     = out_size + UCXGO_PACK_GUARD;
    ucs_status_t status;
    size_t i;

    *overrun = 0;
    if (total > sizeof(stack_buf)) {
        scratch = malloc(total);
        if (scratch == NULL) {
            return UCS_ERR_NO_MEMORY;
        }
    }
    memset(scratch, UCXGO_GUARD_BYTE, total);

    params.field_mask = UCXGO_MKEY_PACK_FIELD_FLAGS;
    params.flags      = export_key ? UCXGO_MKEY_PACK_FLAG_EXPORT : 0;
    if (v1) {
        status = uct_md_mkey_pack(md, memh, scratch);
    } else {
        status = uct_md_mkey_pack_v2(md, memh, address, length, &params, scratch);
    }
    if (status == UCS_OK) {
        for (i = out_size; i < total; ++i) {
            if (scratch[i] != UCXGO_GUARD_BYTE) {
                *overrun = 1;
                break;
            }
        }
        if (out_size > 0) {
            memcpy(out, scratch, out_size);
        }
    }
    if (scratch != stack_buf) {
        free(scratch);
    }
    return status;
}

ucxgo_result_t ucxgo_mkey_pack(uct_md_h md, uct_mem_h memh, void *address,
                               size_t length, int export_key, void *out,
                               size_t out_size)
{
    ucxgo_result_t r = {0};

    r.status = ucxgo_guarded_pack(md, memh, address, length, export_key, 0,
                                  out, out_size, &r.flag);
    r.length = out_size;
    return r;
}

ucs_status_t ucxgo_mkey_pack_v1(uct_md_h md, uct_mem_h memh, void *out,
                                size_t out_size, int *overrun)
{
    return ucxgo_guarded_pack(md, memh, NULL, 0, 0, 1, out, out_size, overrun);
}

ucs_status_t ucxgo_mem_attach(uct_md_h md, const void *buf, size_t size,
                              int hide_errors, uct_mem_h *memh_p)
{
    ucxgo_uct_md_mem_attach_params_t params;

    memset(&params, 0, sizeof(params));
    params.field_mask = UCXGO_MEM_ATTACH_FIELD_FLAGS;
    params.flags      = hide_errors ? UCXGO_MEM_ATTACH_FLAG_HIDE_ERRORS : 0;
    if (ucxgo_abi()->attach_mkey_size) {
        params.field_mask |= UCXGO_MEM_ATTACH_FIELD_MKEY_SIZE;
        params.mkey_size   = size;
    }
    return uct_md_mem_attach(md, buf, &params, memh_p);
}

/* Unpack reads a component-specific number of bytes: give it a zero-padded
 * copy so that a short (but length-checked) buffer is never over-read. */
#define UCXGO_RKEY_PAD 256

ucs_status_t ucxgo_rkey_unpack(uct_component_h component, const void *buf,
                               size_t size, uct_rkey_bundle_t *bundle)
{
    uint8_t stack_buf[UCXGO_PACK_SCRATCH];
    uint8_t *copy = stack_buf;
    ucs_status_t status;

    if (size + UCXGO_RKEY_PAD > sizeof(stack_buf)) {
        copy = calloc(1, size + UCXGO_RKEY_PAD);
        if (copy == NULL) {
            return UCS_ERR_NO_MEMORY;
        }
    } else {
        memset(copy, 0, size + UCXGO_RKEY_PAD);
    }
    if (size > 0) {
        memcpy(copy, buf, size);
    }
    status = uct_rkey_unpack(component, copy, bundle);
    if (copy != stack_buf) {
        free(copy);
    }
    return status;
}

ucs_status_t ucxgo_rkey_release(uct_component_h component,
                                const uct_rkey_bundle_t *bundle)
{
    return uct_rkey_release(component, bundle);
}

ucs_status_t ucxgo_rkey_try(uct_component_h component, const void *buf,
                            size_t size)
{
    uct_rkey_bundle_t bundle;
    ucs_status_t status = ucxgo_rkey_unpack(component, buf, size, &bundle);

    if (status == UCS_OK) {
        uct_rkey_release(component, &bundle);
    }
    return status;
}
