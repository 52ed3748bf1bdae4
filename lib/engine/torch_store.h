/* A client of PyTorch's TCPStore: the key-value store that torchrun's agent serves
 * at MASTER_ADDR:MASTER_PORT, through which collCommInitFromEnv publishes the root's
 * address under torchrun (lib/core/env.c; docs/env.md).  It sets a key and reads one,
 * waiting for it to be set, and nothing else; the wire format and the probe that
 * learns the server's dialect (torch 1.13, or 2.x with its handshake) are in
 * torch_store_wire.h.
 *
 * Every call ends by its deadline (monotonic ns, the communicator's timeout); on
 * failure err gets one line for the user, "torchrun's store at HOST:PORT: what
 * failed: why", and nothing is logged at WARN here: the caller reports it once.
 * One client is used by one thread at a time; its connection is its own. */
#ifndef COLL_TORCH_STORE_H
#define COLL_TORCH_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "collective.h"
#include "socket.h"
#include "torch_store_wire.h"

struct coll_torch_store {
    int fd;                            /* -1 when not connected */
    enum coll_tstore_dialect dialect;
    char where[320];                   /* "torchrun's store at HOST:PORT", for messages */
};

/* Connects to the store at hostport ("host:port", "[v6]:port"; a host name is
 * resolved), retrying a refused connection until the deadline as torch's own
 * client does, learns its dialect with the probe (on a connection of its own)
 * and makes the handshake the dialect asks for.  On failure s is left closed:
 * collInvalidArgument (hostport malformed or unresolvable), collTimeout (no
 * connection or answer by the deadline), collRemoteError (the server closed the
 * connection or answered what no TCPStore does), collSystemError. */
collResult_t coll_torch_store_connect(struct coll_torch_store *s, const char *hostport,
                                      int64_t deadline_ns, char *err, size_t errlen);
/* Sets key (as a Python program would name it, without the leading "/") to the
 * vlen bytes of value, and checks that the store holds it. */
collResult_t coll_torch_store_set(struct coll_torch_store *s, const char *key,
                                  const void *value, size_t vlen, int64_t deadline_ns, char *err,
                                  size_t errlen);
/* Waits until key is set, then reads its value into value (cap bytes; a longer
 * value is refused) and its length into *len_p.  collTimeout when the key is
 * still unset at the deadline. */
collResult_t coll_torch_store_get(struct coll_torch_store *s, const char *key, void *value,
                                  size_t cap, size_t *len_p, int64_t deadline_ns, char *err,
                                  size_t errlen);
/* Closes the connection (the server forgets a wait still pending on it).  Safe on
 * a client that connect left closed. */
void coll_torch_store_close(struct coll_torch_store *s);

#endif
