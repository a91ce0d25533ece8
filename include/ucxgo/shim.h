/*
 * ucx-go shim interface: one C function per Go-visible operation, so that
 * each operation is one cgo crossing (fill params, call UCX, return status).
 * The structs here are ucx-go's own, with one layout for every UCX release;
 * the shims translate them to the loaded release's own types (ucxgo_abi).
 */
#ifndef UCXGO_SHIM_H
#define UCXGO_SHIM_H

#include "abi.h"
#include <stdlib.h>

#ifndef UCXGO_UNSUPPORTED
#include <ucp/api/ucp.h>
#include <uct/api/uct.h>

#define UCXGO_MAX_MDS_PER_COMPONENT 32

/* What a hot-path shim returns, by value: an out-parameter would make the
 * Go caller's variable escape to the heap, one allocation per call. */
typedef struct ucxgo_result {
    ucs_status_t status;
    int          flag;     /* e.g. a pack that overran into the guard area */
    void        *handle;   /* a memh or rkey */
    void        *address;
    size_t       length;
} ucxgo_result_t;

typedef struct ucxgo_component_info {
    char     name[UCT_COMPONENT_NAME_MAX + 1];
    uint64_t flags;
    unsigned md_count;        /* resources reported by UCX */
    char     md_names[UCXGO_MAX_MDS_PER_COMPONENT][UCT_MD_NAME_MAX + 1];
} ucxgo_component_info_t;

/* Version-independent copy of uct_md_attr_v2_t (and of the v1 attributes). */
typedef struct ucxgo_md_attr {
    uint64_t max_alloc;
    uint64_t max_reg;
    uint64_t flags;
    uint64_t reg_mem_types;
    uint64_t reg_nonblock_mem_types;
    uint64_t cache_mem_types;
    uint64_t gva_mem_types;
    uint64_t detect_mem_types;
    uint64_t alloc_mem_types;
    uint64_t access_mem_types;
    uint64_t dmabuf_mem_types;
    ucs_linear_func_t reg_cost;
    uint64_t rkey_packed_size;
    uint64_t exported_mkey_packed_size;
    uint64_t reg_alignment;
    uint8_t  required_mem_flags;
    ucs_cpu_set_t local_cpus;
    char     component_name[UCT_COMPONENT_NAME_MAX + 1];
    uint8_t  global_id[UCT_MD_GLOBAL_ID_MAX];
} ucxgo_md_attr_t;

/* uct_allocated_memory_t grew in 1.19 (sys_device appended) and the MD
 * allocation of 1.19 and later writes it: room for a newer library's
 * struct whatever the headers built against. */
typedef struct ucxgo_allocated_memory {
    uct_allocated_memory_t mem;
    uint8_t                room[64];
} ucxgo_allocated_memory_t;

/* One uct_md_attr_v2_t field: its bit, its place in the loaded release's
 * layout, and its place in ucxgo_md_attr_t. */
typedef struct ucxgo_field_layout {
    uint64_t bit;
    size_t   offset;
    size_t   size;
    const char *name;
    size_t   copy_offset;
} ucxgo_field_layout_t;

/* What the shims use of the release loaded at run time (ucp_get_version,
 * the only run-time version call; libuct and libucp come from one build). */
typedef struct ucxgo_abi {
    unsigned major, minor, patch;  /* loaded release */
    int      supported;            /* 1.16 and later (newer only if built to allow) */
    unsigned md_attr_since;        /* 16, 18 or 22: first release of the layout used */
    size_t   md_attr_size;
    uint64_t md_attr_mask;         /* every field of that layout */
    const ucxgo_field_layout_t *md_attr_fields;
    unsigned md_attr_nfields;
    int      attach_mkey_size;     /* mem_attach params have mkey_size (1.19+) */
} ucxgo_abi_t;

const ucxgo_abi_t *ucxgo_abi(void);

/* Applies kv_count "key\0value\0" pairs (back to back in kv) with modify;
 * a key unknown as given is tried again without prefix (when it starts with
 * it). On failure *failed_kv is the index of the pair. */
ucs_status_t ucxgo_apply_config(void *config, const char *kv, unsigned kv_count,
                                ucs_status_t (*modify)(void *, const char *, const char *),
                                const char *prefix, unsigned *failed_kv);

/* versions */
void ucxgo_built_version(unsigned *major, unsigned *minor, unsigned *patch);

/* UCT discovery and memory domains */
ucs_status_t ucxgo_components(uct_component_h **list, unsigned *count);
ucs_status_t ucxgo_component_query(uct_component_h component,
                                   ucxgo_component_info_t *info);
ucs_status_t ucxgo_md_open(uct_component_h component, const char *md_name,
                           const char *kv, unsigned kv_count, uct_md_h *md_p,
                           unsigned *failed_kv);
ucs_status_t ucxgo_md_query(uct_md_h md, ucxgo_md_attr_t *attr);
ucs_status_t ucxgo_md_query_v1(uct_md_h md, ucxgo_md_attr_t *attr);

/* ABI self-check: raw v2 query into a caller buffer of at least
 * ucxgo_abi()->md_attr_size bytes. */
ucs_status_t ucxgo_md_query_raw(uct_md_h md, uint64_t field_mask, void *buf);

/* UCT memory */
/* handle: the memh */
ucxgo_result_t ucxgo_mem_reg(uct_md_h md, void *address, size_t length,
                             uint64_t flags);
ucs_status_t ucxgo_mem_dereg(uct_md_h md, uct_mem_h memh);
ucs_status_t ucxgo_mem_alloc(uct_md_h md, size_t length, unsigned flags,
                             ucxgo_allocated_memory_t *mem);
ucs_status_t ucxgo_mem_free(ucxgo_allocated_memory_t *mem);

/* Pack an rkey (flags 0) or an exported mkey (export != 0) of exactly
 * out_size bytes. UCX writes into a guarded scratch buffer first; a write
 * past out_size is reported in flag instead of corrupting memory. */
ucxgo_result_t ucxgo_mkey_pack(uct_md_h md, uct_mem_h memh, void *address,
                               size_t length, int export_key, void *out,
                               size_t out_size);
/* The same through the installed v1 uct_md_mkey_pack, for the ABI self-test. */
ucs_status_t ucxgo_mkey_pack_v1(uct_md_h md, uct_mem_h memh, void *out,
                                size_t out_size, int *overrun);
ucs_status_t ucxgo_mem_attach(uct_md_h md, const void *buf, size_t size,
                              int hide_errors, uct_mem_h *memh_p);
ucs_status_t ucxgo_rkey_unpack(uct_component_h component, const void *buf,
                               size_t size, uct_rkey_bundle_t *bundle);
ucs_status_t ucxgo_rkey_release(uct_component_h component,
                                const uct_rkey_bundle_t *bundle);
/* uct_rkey_unpack of buf, released at once: the unpack's status */
ucs_status_t ucxgo_rkey_try(uct_component_h component, const void *buf,
                            size_t size);

/* UCX's log lines (cgo/log_shim.c). A handler pushed on UCX's stack of log
 * handlers formats each line into a ring in C memory and wakes Go through a
 * pipe; no Go code runs on the thread that logs. */
#define UCXGO_LOG_FILE_MAX 64    /* source file's base name */
#define UCXGO_LOG_FUNC_MAX 64    /* function name */
#define UCXGO_LOG_COMP_MAX 16    /* component name (UCX's own bound) */
#define UCXGO_LOG_MSG_MAX  1024  /* message: UCX's default UCX_LOG_BUFFER */

/* One line as the ring stores it (only the used part of text) and as
 * ucxgo_log_pop copies it out. text holds file, function, component and
 * message back to back, without terminators. */
typedef struct ucxgo_log_line {
    uint32_t size;       /* bytes of the record in the ring */
    int32_t  level;      /* ucs_log_level_t; -1 marks ring padding */
    int64_t  time_ns;    /* CLOCK_REALTIME when UCX logged it */
    uint64_t dropped;    /* lines dropped just before this one */
    uint32_t line;
    uint16_t file_len, func_len, comp_len, msg_len;
    char     text[UCXGO_LOG_FILE_MAX + UCXGO_LOG_FUNC_MAX +
                  UCXGO_LOG_COMP_MAX + UCXGO_LOG_MSG_MAX];
} ucxgo_log_line_t;

/* Pushes the handler (once) and returns the pipe's read end, or -1 with
 * errno set (*pushed 0 when UCX's handler table was full). */
int ucxgo_log_install(int *pushed);
/* Routing on: lines go to the ring (levels UCX treats as fatal excepted);
 * off: the handler returns at once and UCX prints. */
void ucxgo_log_route(int on);
/* Handlers that saw routing on and have not returned yet. */
unsigned ucxgo_log_inflight(void);
/* Wakes the reader; ucxgo_log_ack re-arms the wake-up before a drain. */
void ucxgo_log_wake(void);
void ucxgo_log_ack(void);
/* Takes the oldest line into *out: 1, or 0 when the ring is empty. */
int ucxgo_log_pop(ucxgo_log_line_t *out);
/* Lines dropped since the start of the process. */
uint64_t ucxgo_log_dropped(void);

#include "ucp_shim.h"

#endif /* UCXGO_UNSUPPORTED */
#endif
