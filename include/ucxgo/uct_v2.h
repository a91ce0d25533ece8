/*
 * ucx-go's own declaration of the UCT v2 memory-domain API, which no
 * distribution installs. Written from the ABI tables in the README
 * ("UCX versions verified"); field order, types and flag values follow the
 * release selected by UCXGO_UCT_MINOR (set by abi.h). The thresholds below
 * are the releases where UCX changed each item; only the ranges listed in
 * abi.h are verified against a real library (TestABI in package cgo).
 */
#ifndef UCXGO_UCT_V2_H
#define UCXGO_UCT_V2_H

#include <stddef.h>
#include <stdint.h>
#include <uct/api/uct.h>

/* uct_md_attr_v2_t field_mask bits. */
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

#if UCXGO_UCT_MINOR >= 22
#  define UCXGO_MD_ATTR_ALL ((1ull << 19) - 1)
#else
#  define UCXGO_MD_ATTR_ALL ((1ull << 18) - 1)
#endif

typedef struct ucxgo_uct_md_attr_v2 {
    uint64_t          field_mask;
    uint64_t          max_alloc;
    size_t            max_reg;
    uint64_t          flags;
    uint64_t          reg_mem_types;
#if UCXGO_UCT_MINOR >= 15
    uint64_t          reg_nonblock_mem_types; /* inserted in 1.15 */
#endif
    uint64_t          cache_mem_types;
#if UCXGO_UCT_MINOR >= 18
    uint64_t          gva_mem_types;       /* inserted mid-struct in 1.18 */
#endif
    uint64_t          detect_mem_types;
    uint64_t          alloc_mem_types;
    uint64_t          access_mem_types;
    uint64_t          dmabuf_mem_types;
    ucs_linear_func_t reg_cost;
    char              component_name[UCT_COMPONENT_NAME_MAX];
    size_t            rkey_packed_size;
    ucs_cpu_set_t     local_cpus;
    size_t            exported_mkey_packed_size;
    char              global_id[UCT_MD_GLOBAL_ID_MAX];
#if UCXGO_UCT_MINOR >= 16
    size_t            reg_alignment;
#endif
#if UCXGO_UCT_MINOR >= 22
    uint8_t           required_mem_flags;
#endif
} ucxgo_uct_md_attr_v2_t;

/* MD capability flag (uct.h has the value from 1.14 on; named here so the
 * binding does not depend on the enum having it). */
#define UCXGO_MD_FLAG_EXPORTED_MKEY 0x200ull

/* uct_md_mkey_pack_params_t */
#define UCXGO_MKEY_PACK_FIELD_FLAGS 0x1ull
#if UCXGO_UCT_MINOR >= 15
#  define UCXGO_MKEY_PACK_FLAG_EXPORT 0x4u
#else
#  define UCXGO_MKEY_PACK_FLAG_EXPORT 0x2u
#endif
typedef struct ucxgo_uct_md_mkey_pack_params {
    uint64_t field_mask;
    unsigned flags;
} ucxgo_uct_md_mkey_pack_params_t;

/* uct_md_mem_attach_params_t */
#define UCXGO_MEM_ATTACH_FIELD_FLAGS      0x1ull
#define UCXGO_MEM_ATTACH_FIELD_MKEY_SIZE  0x2ull /* 1.19+ */
#define UCXGO_MEM_ATTACH_FLAG_HIDE_ERRORS 0x1ull
typedef struct ucxgo_uct_md_mem_attach_params {
    uint64_t field_mask;
    uint64_t flags;
#if UCXGO_UCT_MINOR >= 19
    size_t   mkey_size;
#endif
} ucxgo_uct_md_mem_attach_params_t;

/* uct_md_mem_reg_params_t */
#define UCXGO_MEM_REG_FIELD_FLAGS 0x1ull
typedef struct ucxgo_uct_md_mem_reg_params {
    uint64_t          field_mask;
    uint64_t          flags;
    int               dmabuf_fd;
    size_t            dmabuf_offset;
#if UCXGO_UCT_MINOR >= 22
    ucs_memory_type_t mem_type;
#endif
} ucxgo_uct_md_mem_reg_params_t;

/* uct_md_mem_dereg_params_t */
#define UCXGO_MEM_DEREG_FIELD_MEMH 0x1ull
typedef struct ucxgo_uct_md_mem_dereg_params {
    uint64_t          field_mask;
    unsigned          flags;
    uct_mem_h         memh;
    uct_completion_t *comp;
} ucxgo_uct_md_mem_dereg_params_t;

/* Functions libuct.so.0 exports for these types. */
ucs_status_t uct_md_query_v2(uct_md_h md, ucxgo_uct_md_attr_v2_t *md_attr);
#if UCXGO_UCT_MINOR >= 16
ucs_status_t uct_md_mkey_pack_v2(uct_md_h md, uct_mem_h memh, void *address,
                                 size_t length,
                                 const ucxgo_uct_md_mkey_pack_params_t *params,
                                 void *mkey_buffer);
#else
ucs_status_t uct_md_mkey_pack_v2(uct_md_h md, uct_mem_h memh,
                                 const ucxgo_uct_md_mkey_pack_params_t *params,
                                 void *mkey_buffer);
#endif
ucs_status_t uct_md_mem_attach(uct_md_h md, const void *mkey_buffer,
                               ucxgo_uct_md_mem_attach_params_t *params,
                               uct_mem_h *memh_p);
ucs_status_t uct_md_mem_reg_v2(uct_md_h md, void *address, size_t length,
                               const ucxgo_uct_md_mem_reg_params_t *params,
                               uct_mem_h *memh_p);
ucs_status_t uct_md_mem_dereg_v2(uct_md_h md,
                                 const ucxgo_uct_md_mem_dereg_params_t *params);

#endif
