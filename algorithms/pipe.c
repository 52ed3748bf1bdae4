/* The pipelined exchange engine (see pipe.h for the dependency rules). */
#include "pipe.h"

#include <string.h>

#include "exec.h"
#include "regcache.h"

#define PIPE_SLOTS 64 /* > COLL_PIPE_MAX_WINDOW and the send window */
#define PIPE_SEND_WINDOW 32

/* Whether [p, p+n) lies in [base, base+len). */
static bool pipe_within(const void *base, size_t len, const void *p, size_t n)
{
    uintptr_t b = (uintptr_t)base, q = (uintptr_t)p;
    return base != NULL && q >= b && n <= len && q - b <= len - n;
}

collResult_t coll_pipe_run(struct coll_pipe *p)
{
    struct coll_comm *comm = p->comm;
    struct coll_req *sreq[PIPE_SLOTS], *rreq[PIPE_SLOTS];
    void *rbuf[PIPE_SLOTS];
    size_t sp = 0, sd = 0, rp = 0, rd = 0;
    size_t total = p->total;
    size_t window = p->window < 1 ? 1 : p->window;
    if (window > COLL_PIPE_MAX_WINDOW)
        window = COLL_PIPE_MAX_WINDOW;
    size_t send_total = p->send_conn ? total : 0;
    size_t recv_total = p->recv_conn ? total : 0;
    struct coll_wait w;
    coll_exec_wait_init(comm, &w, p->piece_bytes);

    /* Handles for the user's buffers, where the transports have them. */
    void *smh = send_total > 0 ? coll_reg_handle(comm, p->send_conn, p->send_reg,
                                                 p->send_reg_bytes) : NULL;
    void *rmh = recv_total > 0 ? coll_reg_handle(comm, p->recv_conn, p->recv_reg,
                                                 p->recv_reg_bytes) : NULL;
    /* Zero copy: pieces are read where the peer's transport put them, unless
     * they can land in place. */
    bool zc = recv_total > 0 && p->recv_conn->tp->recv_peek != NULL && rmh == NULL;
    struct coll_req zreq = {.conn = p->recv_conn}; /* stands for the lent receive in waits */
    size_t zoff = 0;                              /* bytes of piece rd taken so far */

    while (sd < send_total || rd < recv_total) {
        bool moved = false;
        while (zc && rd < recv_total &&
               (p->recv_lag == 0 || rd < p->recv_lag || sd + p->recv_lag > rd)) {
            void *buf;
            size_t bytes, len = 0;
            const void *src = NULL;
            p->recv_buf(p->ctx, rd, &buf, &bytes);
            if (zoff < bytes) {
                COLL_CHECK(coll_exec_peek(comm, p->recv_conn, bytes - zoff, &src, &len));
                if (src == NULL)
                    break;
                if (p->consume)
                    p->consume(p->ctx, rd, zoff, src, len);
                else
                    memcpy((char *)buf + zoff, src, len);
                coll_exec_release(p->recv_conn);
                zoff += len;
                moved = true;
            }
            if (zoff == bytes) {
                if (p->process && !p->consume)
                    p->process(p->ctx, rd, buf);
                rd++;
                zoff = 0;
                moved = true;
            }
        }
        while (!zc && rp < recv_total && rp - rd < window &&
               (p->recv_lag == 0 || rp < p->recv_lag || sd + p->recv_lag > rp)) {
            void *buf;
            size_t bytes;
            p->recv_buf(p->ctx, rp, &buf, &bytes);
            rbuf[rp % PIPE_SLOTS] = buf;
            COLL_CHECK(coll_exec_irecv_mh(comm, p->recv_conn, buf, bytes,
                                          pipe_within(p->recv_reg, p->recv_reg_bytes, buf, bytes)
                                              ? rmh : NULL,
                                          &rreq[rp % PIPE_SLOTS]));
            rp++;
            moved = true;
        }
        while (sp < send_total && sp - sd < PIPE_SEND_WINDOW &&
               (!p->send_after_recv || sp < p->send_lag || rd + p->send_lag > sp)) {
            const void *buf;
            size_t bytes;
            p->send_buf(p->ctx, sp, &buf, &bytes);
            COLL_CHECK(coll_exec_isend_mh(comm, p->send_conn, buf, bytes,
                                          pipe_within(p->send_reg, p->send_reg_bytes, buf, bytes)
                                              ? smh : NULL,
                                          &sreq[sp % PIPE_SLOTS]));
            sp++;
            moved = true;
        }
        while (!zc && rd < rp) {
            bool done;
            COLL_CHECK(coll_exec_test(comm, &rreq[rd % PIPE_SLOTS], &done));
            if (!done)
                break;
            if (p->process)
                p->process(p->ctx, rd, rbuf[rd % PIPE_SLOTS]);
            rd++;
            moved = true;
        }
        while (sd < sp) {
            bool done;
            COLL_CHECK(coll_exec_test(comm, &sreq[sd % PIPE_SLOTS], &done));
            if (!done)
                break;
            sd++;
            moved = true;
        }
        if (moved) {
            w.idle_since = 0;
            continue;
        }
        struct coll_req *pending[2];
        int np = 0;
        if (zc && rd < recv_total)
            pending[np++] = &zreq;
        else if (rd < rp)
            pending[np++] = rreq[rd % PIPE_SLOTS];
        if (sd < sp)
            pending[np++] = sreq[sd % PIPE_SLOTS];
        COLL_CHECK(coll_exec_idle(comm, &w, pending, np));
    }
    return collSuccess;
}
