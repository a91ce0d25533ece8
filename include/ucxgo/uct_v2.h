/*
 * ucx-go's own declaration of the UCT v2 memory-domain API, which no
 * release installs. Written from the ABI tables of the README ("UCX
 * releases"). The soname is the same in every release while
 * uct_md_attr_v2_t moved fields twice (1.18: gva_mem_types inserted; 1.22:
 * required_mem_flags appended), so all three layouts are declared and the
 * shims pick one at run time from the release actually loaded (ucxgo_abi).
 * The parameter structs below are declared in their largest form: UCX reads
 * only the fields whose field_mask bit is set, and the shims set the bits
 * of newer fields only when the loaded release has them.
 */
#ifndef UCXGO_UCT_V2_H
#define UCXGO_UCT_V2_H

#include <stddef.h>
#include <stdint.h>
#include <uct/api/uct.h>

/* uct_md_attr_v2_t field_mask bits (1.15 and later). */
enum {
    UCXGO_MD_ATTR_MAX_ALLOC                 = 1ull << 0,
    UCXGO_MD_ATTR_MAX_REG                   = 1ull << 1,
    UCXGO_MD_ATTR_FLAGS                     = 1ull << 2,
    UCXGO_MD_ATTR_REG_MEM_TYPES             = 1ull << 3,
    UCXGO_MD_ATTR_REG_NONBLOCK_MEM_TYPES    = 1ull << 4,
    UCXGO_MD_ATTR_CACHE_MEM_TYPES           = 1ull << 5,
    UCXGO_MD_ATTR_DETECT_MEM_TYPES          = 1ull << 6,
    UCXGO_MD_ATTR_ALLOC_MEM_TYPES           = 1ull << 7,
    UCXGO_MD_ATTR_ACCESS_MEM_TYPES          = 1ull << 8,
    UCXGO_MD_ATTR_DMABUF_MEM_TYPES          = 1ull << 9,
    UCXGO_MD_ATTR_REG_COST                  = 1ull << 10,
    UCXGO_MD_ATTR_COMPONENT_NAME            = 1ull << 11,
    UCXGO_MD_ATTR_RKEY_PACKED_SIZE          = 1ull << 12,
    UCXGO_MD_ATTR_LOCAL_CPUS                = 1ull << 13,
    UCXGO_MD_ATTR_EXPORTED_MKEY_PACKED_SIZE = 1ull << 14,
    UCXGO_MD_ATTR_GLOBAL_ID                 = 1ull << 15,
    UCXGO_MD_ATTR_REG_ALIGNMENT             = 1ull << 16, /* 1.16+ */
    UCXGO_MD_ATTR_GVA_MEM_TYPES             = 1ull << 17, /* 1.18+ */
    UCXGO_MD_ATTR_REQUIRED_MEM_FLAGS        = 1ull << 18  /* 1.22+ */
};

/* uct_md_attr_v2_t; _GVA and _TAIL are the fields a layout adds. */
#define UCXGO_MD_ATTR_V2_STRUCT(_name, _GVA, _TAIL) \
    typedef struct _name { \
        uint64_t          field_mask; \
        uint64_t          max_alloc; \
        size_t            max_reg; \
        uint64_t          flags; \
        uint64_t          reg_mem_types; \
        uint64_t          reg_nonblock_mem_types; \
        uint64_t          cache_mem_types; \
        _GVA \
        uint64_t          detect_mem_types; \
        uint64_t          alloc_mem_types; \
        uint64_t          access_mem_types; \
        uint64_t          dmabuf_mem_types; \
        ucs_linear_func_t reg_cost; \
        char              component_name[UCT_COMPONENT_NAME_MAX]; \
        size_t            rkey_packed_size; \
        ucs_cpu_set_t     local_cpus; \
        size_t            exported_mkey_packed_size; \
        char              global_id[UCT_MD_GLOBAL_ID_MAX]; \
        size_t            reg_alignment; \
        _TAIL \
    } _name##_t;

UCXGO_MD_ATTR_V2_STRUCT(ucxgo_md_attr_v2_1_16, , )
UCXGO_MD_ATTR_V2_STRUCT(ucxgo_md_attr_v2_1_18, uint64_t gva_mem_types;, )
UCXGO_MD_ATTR_V2_STRUCT(ucxgo_md_attr_v2_1_22, uint64_t gva_mem_types;,
                        uint8_t required_mem_flags;)

/* MD capability flag (the same value in every release from 1.14). */
#define UCXGO_MD_FLAG_EXPORTED_MKEY 0x200ull

/* uct_md_mkey_pack_params_t; EXPORT is 0x4 from 1.15 on. */
#define UCXGO_MKEY_PACK_FIELD_FLAGS 0x1ull
#define UCXGO_MKEY_PACK_FLAG_EXPORT 0x4u
typedef struct ucxgo_uct_md_mkey_pack_params {
    uint64_t field_mask;
    unsigned flags;
} ucxgo_uct_md_mkey_pack_params_t;

/* uct_md_mem_attach_params_t; mkey_size exists from 1.19 on. */
#define UCXGO_MEM_ATTACH_FIELD_FLAGS      0x1ull
#define UCXGO_MEM_ATTACH_FIELD_MKEY_SIZE  0x2ull
#define UCXGO_MEM_ATTACH_FLAG_HIDE_ERRORS 0x1ull
typedef struct ucxgo_uct_md_mem_attach_params {
    uint64_t field_mask;
    uint64_t flags;
    size_t   mkey_size;
} ucxgo_uct_md_mem_attach_params_t;

/* uct_md_mem_reg_params_t; mem_type exists from 1.22 on (never set here). */
#define UCXGO_MEM_REG_FIELD_FLAGS 0x1ull
typedef struct ucxgo_uct_md_mem_reg_params {
    uint64_t          field_mask;
    uint64_t          flags;
    int               dmabuf_fd;
    size_t            dmabuf_offset;
    ucs_memory_type_t mem_type;
} ucxgo_uct_md_mem_reg_params_t;

/* uct_md_mem_dereg_params_t (unchanged in every release). */
#define UCXGO_MEM_DEREG_FIELD_MEMH 0x1ull
typedef struct ucxgo_uct_md_mem_dereg_params {
    uint64_t          field_mask;
    unsigned          flags;
    uct_mem_h         memh;
    uct_completion_t *comp;
} ucxgo_uct_md_mem_dereg_params_t;

/* Functions libuct.so.0 exports for these types (1.16 and later).
 * md_attr points to the loaded release's uct_md_attr_v2_t layout. */
ucs_status_t uct_md_query_v2(uct_md_h md, void *md_attr);
ucs_status_t uct_md_mkey_pack_v2(uct_md_h md, uct_mem_h memh, void *address,
                                 size_t length,
                                 const ucxgo_uct_md_mkey_pack_params_t *params,
                                 void *mkey_buffer);
ucs_status_t uct_md_mem_attach(uct_md_h md, const void *mkey_buffer,
                               ucxgo_uct_md_mem_attach_params_t *params,
                               uct_mem_h *memh_p);
ucs_status_t uct_md_mem_reg_v2(uct_md_h md, void *address, size_t length,
                               const ucxgo_uct_md_mem_reg_params_t *params,
                               uct_mem_h *memh_p);
ucs_status_t uct_md_mem_dereg_v2(uct_md_h md,
                                 const ucxgo_uct_md_mem_dereg_params_t *params);

#endif
