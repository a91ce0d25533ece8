/*
 * ucx-go UCP shims. Completion, endpoint errors, connection requests and
 * incoming active messages are recorded C-side by the shims' callbacks (into
 * request memory or the worker's queues) and read by Go after progress: no
 * Go callback runs inside UCX.
 */
#ifndef UCXGO_UCP_SHIM_H
#define UCXGO_UCP_SHIM_H

#include <stdint.h>
#include <sys/socket.h>
#include <ucp/api/ucp.h>

/* Lives in the space UCP reserves in every request (request_size). */
typedef struct ucxgo_req {
    int32_t      done;     /* 0 pending, 1 complete (atomic) */
    int32_t      status;   /* ucs_status_t once done */
    uint64_t     length;   /* received length (AM data, tag and stream receives) */
    uint64_t     tag;      /* the sender's tag (tag receive) */
} ucxgo_req_t;

typedef struct ucxgo_am_msg {
    struct ucxgo_am_msg *next;
    unsigned             id;
    int                  rndv;        /* data stays in UCX: receive or release */
    void                *data_desc;   /* rendezvous descriptor */
    ucp_ep_h             reply_ep;
    size_t               header_length;
    size_t               length;
    uint8_t             *header;      /* points into bytes[] */
    uint8_t             *data;        /* eager data, points into bytes[] */
    uint8_t              bytes[];
} ucxgo_am_msg_t;

typedef struct ucxgo_conn {
    struct ucxgo_conn       *next;
    ucp_conn_request_h       request;
    struct sockaddr_storage  client_addr;
} ucxgo_conn_t;

typedef struct ucxgo_worker {
    ucp_worker_h     worker;
    uint64_t         events;   /* bumped by every callback that queues work */
    ucxgo_am_msg_t  *am_head, *am_tail; /* queued; Go takes the list under its lock */
    ucxgo_am_msg_t  *am_spent; /* taken and copied by Go: freed by the next
                                  progress or spin, or by destroy */
    uint64_t         am_dropped; /* messages not queued: out of memory */
    uint64_t         completions; /* requests completed by callbacks (atomic) */
    uint64_t         ep_errors; /* endpoint failures recorded (also bump events) */
    /* The outcome of the last receive that completed at once, or of the
     * last probe (under the worker's lock): its length and sender tag. */
    uint64_t         imm_len, imm_tag;
} ucxgo_worker_t;

typedef struct ucxgo_ep {
    ucp_ep_h         ep;
    ucxgo_worker_t  *worker;
    int32_t          error;    /* ucs_status_t from the error handler, 0 if none */
} ucxgo_ep_t;

typedef struct ucxgo_listener {
    ucp_listener_h   listener;
    ucxgo_worker_t  *worker;
    ucxgo_conn_t    *head, *tail;
    int              closed;   /* requests are rejected on arrival */
    int              refuse_by_closing; /* see ucxgo_listener_refuse */
} ucxgo_listener_t;

typedef struct ucxgo_am_handler {
    ucxgo_worker_t  *worker;
    unsigned         id;
} ucxgo_am_handler_t;

typedef struct ucxgo_context_info {
    uint64_t request_size;
    uint64_t thread_mode;
    uint64_t memory_types;
    char     name[64];
} ucxgo_context_info_t;

/* context */
ucs_status_t ucxgo_ucp_init(uint64_t features, int mt_workers_shared,
                            const char *kv, unsigned kv_count,
                            const char *name, ucp_context_h *ctx_p,
                            unsigned *failed_kv);
ucs_status_t ucxgo_ucp_query(ucp_context_h ctx, ucxgo_context_info_t *info);

/* worker */
ucs_status_t ucxgo_worker_create(ucp_context_h ctx, int thread_mode,
                                 ucxgo_worker_t **w_p);
void ucxgo_worker_destroy(ucxgo_worker_t *w);
/* The largest active-message header the worker sends (ucp_worker_query). */
ucs_status_t ucxgo_worker_max_am_header(ucxgo_worker_t *w, size_t *n);
ucs_status_t ucxgo_worker_address(ucxgo_worker_t *w, void *buf, size_t cap,
                                  size_t *len);
/* The calls Go makes per operation (progress, spin, the data path below)
 * take the worker, endpoint, memory handle, remote key and request as
 * uintptr_t: cgo checks every pointer argument for Go pointers, at about
 * the cost of the crossing itself, and these are C memory. Buffers, which
 * may be Go memory, stay pointers and are checked. */
unsigned ucxgo_worker_progress(uintptr_t w);
unsigned ucxgo_worker_spin(uintptr_t w, uintptr_t req, unsigned rounds);
ucs_status_t ucxgo_worker_efd(ucxgo_worker_t *w, int *fd);
ucs_status_t ucxgo_worker_arm(ucxgo_worker_t *w);
ucs_status_t ucxgo_worker_signal(ucxgo_worker_t *w);
ucxgo_am_msg_t *ucxgo_worker_take_am(ucxgo_worker_t *w);
void ucxgo_am_msgs_free(ucxgo_am_msg_t *list);
ucs_status_t ucxgo_worker_set_am_handler(ucxgo_worker_t *w, unsigned id,
                                         ucxgo_am_handler_t **h_p);
void ucxgo_worker_clear_am_handler(ucxgo_worker_t *w, unsigned id,
                                   ucxgo_am_handler_t *h);
/* Sets every 16-bit id of the worker's AM handler table to no handler. */
ucs_status_t ucxgo_worker_cover_am_ids(ucxgo_worker_t *w);
ucs_status_ptr_t ucxgo_worker_flush(ucxgo_worker_t *w);

/* listener */
ucs_status_t ucxgo_listener_create(ucxgo_worker_t *w, const struct sockaddr *addr,
                                   socklen_t addrlen, int refuse_by_closing,
                                   ucxgo_listener_t **l_p,
                                   struct sockaddr_storage *bound);
void ucxgo_listener_close(ucxgo_listener_t *l);
void ucxgo_listener_destroy(ucxgo_listener_t *l);
ucxgo_conn_t *ucxgo_listener_take(ucxgo_listener_t *l);
ucs_status_t ucxgo_listener_reject(ucxgo_listener_t *l, ucxgo_conn_t *c);

/* endpoints; err_mode_peer selects UCP_ERR_HANDLING_MODE_PEER */
ucs_status_t ucxgo_ep_create_addr(ucxgo_worker_t *w, const void *addr,
                                  int err_mode_peer, ucxgo_ep_t **ep_p);
ucs_status_t ucxgo_ep_create_sockaddr(ucxgo_worker_t *w, const struct sockaddr *addr,
                                      socklen_t addrlen, int err_mode_peer,
                                      ucxgo_ep_t **ep_p);
ucs_status_t ucxgo_ep_create_conn(ucxgo_worker_t *w, ucxgo_conn_t *c,
                                  int err_mode_peer, ucxgo_ep_t **ep_p);
ucs_status_ptr_t ucxgo_ep_close(ucxgo_ep_t *ep, int force);
void ucxgo_ep_free(ucxgo_ep_t *ep);
ucs_status_ptr_t ucxgo_ep_flush(uintptr_t ep);

/* memory */
/* handle: the memh; address and length: the mapped range */
ucxgo_result_t ucxgo_mem_map(ucp_context_h ctx, void *address, size_t length,
                             int allocate, unsigned prot, int mem_type,
                             const void *exported);
ucs_status_t ucxgo_mem_unmap(ucp_context_h ctx, ucp_mem_h memh);
/* ucp_memh_pack, always with UCP_MEMH_PACK_FLAG_EXPORT (without it UCX
 * aborts the process), copied into out when it fits; length is the size. */
ucxgo_result_t ucxgo_memh_export(ucp_context_h ctx, ucp_mem_h memh, void *out,
                                 size_t cap);
ucxgo_result_t ucxgo_rkey_pack(ucp_context_h ctx, ucp_mem_h memh, void *out,
                               size_t cap);
/* handle: the rkey */
ucxgo_result_t ucxgo_ep_rkey_unpack(ucxgo_ep_t *ep, const void *buf, size_t len);
void ucxgo_rkey_destroy(ucp_rkey_h rkey);
/* Which reader the endpoint gives a probe key (ucp/rkeyreader.go): the
 * status of the unpack; on UCS_OK, *mapped is 1 when ucp_rkey_ptr(rkey, 0)
 * gave a local address, and *marker the 8 bytes there. The key is destroyed
 * before returning. */
ucs_status_t ucxgo_ep_rkey_reader(ucxgo_ep_t *ep, const void *buf, size_t len,
                                  int *mapped, uint64_t *marker);
/* A one-page System V segment with marker in its first 8 bytes, attached at
 * *addr and marked for removal, so that the kernel frees it at the last
 * detach (process exit included). Returns its id, or -errno. */
int ucxgo_sysv_marked_segment(uint64_t marker, void **addr);
void ucxgo_sysv_detach(void *addr);

/* data path: NULL (done), an error pointer, or a request (ucxgo_req_t).
 * imm (tagged and active-message sends) asks UCX to complete within the
 * call or refuse with UCS_ERR_NO_RESOURCE having kept nothing
 * (UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL): Go then passes its buffer unpinned. */
ucs_status_ptr_t ucxgo_put(uintptr_t ep, const void *buf, size_t len,
                           uintptr_t memh, uint64_t raddr, uintptr_t rkey);
ucs_status_ptr_t ucxgo_get(uintptr_t ep, void *buf, size_t len,
                           uintptr_t memh, uint64_t raddr, uintptr_t rkey);
/* ucp_atomic_op_nbx of one size-byte word (4 or 8) at raddr: operand is the
 * value (the compare value for CSWAP), reply, if not 0, receives the old
 * value (for CSWAP it holds the swap value in). Both are C memory, passed
 * as integers (Go's cgo pointer check has nothing to check in them), and
 * stay valid until the request completes: UCX may read and write them
 * until then. */
ucs_status_ptr_t ucxgo_atomic(uintptr_t ep, unsigned op, unsigned size,
                              uintptr_t operand, uintptr_t reply, uint64_t raddr,
                              uintptr_t rkey);
/* Tag matching: a send of len bytes with tag; a receive of a message
 * whose tag matches tag under mask into buf. A receive that completes at
 * once (the message was waiting, eager) sets w->imm_len and w->imm_tag. */
ucs_status_ptr_t ucxgo_tag_send(uintptr_t ep, uint64_t tag, const void *buf,
                                size_t len, uintptr_t memh, int imm);
ucs_status_ptr_t ucxgo_tag_recv(uintptr_t w, void *buf, size_t len,
                                uint64_t tag, uint64_t mask, uintptr_t memh);
/* A non-removing probe: 1 (w->imm_len and imm_tag set) if a message
 * matching tag under mask has arrived, else 0. */
int ucxgo_tag_probe(ucxgo_worker_t *w, uint64_t tag, uint64_t mask);
/* Streams: a send; a receive of up to len bytes (all of them with
 * waitall), w->imm_len set when it completes at once. */
ucs_status_ptr_t ucxgo_stream_send(uintptr_t ep, const void *buf, size_t len,
                                   uintptr_t memh);
ucs_status_ptr_t ucxgo_stream_recv(uintptr_t ep, void *buf, size_t len,
                                   uintptr_t memh, int waitall);
/* ucp_request_cancel of a request in flight. */
void ucxgo_request_cancel(ucxgo_worker_t *w, void *request);
ucs_status_ptr_t ucxgo_am_send(uintptr_t ep, unsigned id, const void *header,
                               size_t header_len, const void *data,
                               size_t len, uintptr_t memh, unsigned flags,
                               int imm);
ucs_status_ptr_t ucxgo_am_recv_data(uintptr_t w, void *desc, void *buf,
                                    size_t len, uintptr_t memh);
void ucxgo_am_data_release(ucxgo_worker_t *w, void *desc);
void ucxgo_request_release(uintptr_t w, uintptr_t req, int cancel);

#endif
