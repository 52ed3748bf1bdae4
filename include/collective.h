/*
 * libcollective: collective communication between processes or threads.
 *
 * The API follows NCCL's names, argument order, result codes, data types and
 * reduction ops with `coll` in place of `nccl`, so NCCL code ports by
 * search-and-replace.  Buffers are host memory.  Counts are always numbers of
 * elements, never bytes.
 *
 * Threading: one thread at a time may call into a given communicator; different
 * communicators may be used from different threads at the same time.  Ranks may
 * be processes, or threads of one process that each call collCommInitRank with
 * the same unique id.
 */
#ifndef COLLECTIVE_H
#define COLLECTIVE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define COLL_API __attribute__((visibility("default")))
#else
#define COLL_API
#endif

#define COLL_MAJOR 0
#define COLL_MINOR 1
#define COLL_PATCH 0
/* Same encoding as NCCL_VERSION_CODE: major * 10000 + minor * 100 + patch. */
#define COLL_VERSION_CODE (COLL_MAJOR * 10000 + COLL_MINOR * 100 + COLL_PATCH)

#define COLL_UNIQUE_ID_BYTES 128
typedef struct {
    char internal[COLL_UNIQUE_ID_BYTES];
} collUniqueId;

typedef struct coll_comm *collComm_t; /* opaque */
/* A stream: see collStreamCreate.  A pointer, like cudaStream_t, so that the
 * same parameter can carry either (see "Streams" below). */
typedef void *collStream_t;

typedef enum {
    collSuccess = 0,
    collUnhandledCudaError = 1,
    collSystemError = 2,
    collInternalError = 3,
    collInvalidArgument = 4,
    collInvalidUsage = 5,
    collRemoteError = 6,
    collInProgress = 7,
    collTimeout = 8,
    collNumResults = 9
} collResult_t;

typedef enum {
    collInt8 = 0, collChar = 0,
    collUint8 = 1,
    collInt32 = 2, collInt = 2,
    collUint32 = 3,
    collInt64 = 4,
    collUint64 = 5,
    collFloat16 = 6, collHalf = 6,
    collFloat32 = 7, collFloat = 7,
    collFloat64 = 8, collDouble = 8,
    collBfloat16 = 9,
    collNumTypes = 10
} collDataType_t;

typedef enum {
    collSum = 0,
    collProd = 1,
    collMax = 2,
    collMin = 3,
    collAvg = 4,
    collNumOps = 5
} collRedOp_t;

/*
 * collGetVersion: writes COLL_VERSION_CODE of the library (not of this header)
 * to *version.  Returns collInvalidArgument when version is NULL.
 * Thread safety: any thread, any time.
 */
COLL_API collResult_t collGetVersion(int *version);

/*
 * collGetUniqueId: creates the identity of a new communicator.  It starts a
 * root listener (a thread of the calling process) and writes into *uniqueId its
 * address, the id format number and a fresh random secret.  Pass the id to every
 * rank (by any means) and call collCommInitRank there.  The listener serves one
 * communicator and ends once every rank has registered, or after COLL_TIMEOUT_MS.
 * With COLL_COMM_ID=host:port set, no listener starts: the id names that
 * address and rank 0 becomes the root during collCommInitRank.
 * Returns collInvalidArgument for a NULL uniqueId, collSystemError when no
 * listener can be started.
 * Thread safety: any thread.
 */
COLL_API collResult_t collGetUniqueId(collUniqueId *uniqueId);

/*
 * collCommInitRank: creates this rank's communicator among nranks ranks that all
 * pass the same commId, and rank in [0, nranks).  Blocks until every rank has
 * joined, or fails on every rank within COLL_TIMEOUT_MS (wrong nranks, duplicate
 * rank, unreachable root).  On success *comm is set; on failure it is left alone.
 * Thread safety: each rank's call from its own thread; the id may be shared.
 */
COLL_API collResult_t collCommInitRank(collComm_t *comm, int nranks, collUniqueId commId,
                                       int rank);

/*
 * Communicator configuration, as NCCL's: declare it with COLL_CONFIG_INITIALIZER,
 * then set the fields you want.  A field left at its initializer value takes the
 * default (given below, or the environment's).
 *   blocking    1 (default): calls return when done.  0: collCommInitRankConfig,
 *               collCommSplit, collCommShrink and every call on the communicator
 *               with a NULL stream may return collInProgress; the call then goes
 *               on in the background and collCommGetAsyncError returns
 *               collInProgress until it (and every call before it) is done, then
 *               its result.  Inputs are still checked at once.
 *   timeoutMs   how long one operation may wait before it fails with collTimeout
 *               (default COLL_TIMEOUT_MS, itself 300000).
 *   commName    a name for log and error messages (copied; default none).
 */
typedef struct {
    size_t size;          /* sizeof(collConfig_t), set by the initializer */
    unsigned int magic;   /* COLL_CONFIG_MAGIC */
    unsigned int version; /* COLL_VERSION_CODE of the header */
    int blocking;
    int timeoutMs;
    const char *commName;
} collConfig_t;

#define COLL_CONFIG_MAGIC 0xcafebeefu
#define COLL_CONFIG_UNDEF_INT (-2147483647 - 1)
#define COLL_CONFIG_UNDEF_PTR NULL
#define COLL_CONFIG_INITIALIZER                                                          \
    {                                                                                    \
        sizeof(collConfig_t), COLL_CONFIG_MAGIC, COLL_VERSION_CODE,                      \
            COLL_CONFIG_UNDEF_INT, COLL_CONFIG_UNDEF_INT, COLL_CONFIG_UNDEF_PTR          \
    }

/*
 * collCommInitRankConfig: collCommInitRank with a configuration (NULL: the
 * defaults).  With config->blocking == 0 it returns collInProgress at once with
 * *comm set: poll collCommGetAsyncError(*comm) until it is no longer
 * collInProgress.  collCommAbort(*comm) may be called meanwhile from any thread.
 * Returns collInvalidArgument naming a malformed config field.
 */
COLL_API collResult_t collCommInitRankConfig(collComm_t *comm, int nranks, collUniqueId commId,
                                             int rank, collConfig_t *config);

/*
 * collCommSplit: like MPI_Comm_split.  Every rank of comm calls it; the ranks
 * that pass the same color form a new communicator, ordered by key, then by their
 * rank in comm.  color COLL_SPLIT_NOCOLOR joins none: *newcomm is set to NULL.
 * config NULL: the new communicator inherits comm's configuration.  comm itself
 * is unchanged.  Collective over comm: no other call on comm may be in progress.
 */
#define COLL_SPLIT_NOCOLOR (-1)
COLL_API collResult_t collCommSplit(collComm_t comm, int color, int key, collComm_t *newcomm,
                                    collConfig_t *config);

/*
 * collCommShrink: a new communicator of the ranks of comm that are not in
 * excludeRanksList (ranks of comm, each at most once), renumbered in their order
 * in comm.  Only those ranks call it, with the same list; the excluded ranks may
 * be dead, stopped or unreachable.  It does not use comm's connections, so comm
 * may be poisoned.  shrinkFlags:
 *   COLL_SHRINK_DEFAULT  comm must be healthy and idle.
 *   COLL_SHRINK_ABORT    comm may have failed: calls still queued on it are
 *                        failed first.
 *   COLL_SHRINK_DETECT   (libcollective) also excludes the ranks that do not
 *                        answer: each survivor probes the others' bootstrap
 *                        listeners, and the lowest live rank decides the members.
 *                        Use it when the survivors do not know who failed.
 *                        collCommCount on the new communicator tells how many
 *                        remain.  The rank a failure was blamed on (silent for
 *                        a peer's timeout; every rank hears whom) is waited
 *                        for a third of timeoutMs (1-10 s), so a stopped rank
 *                        costs about one timeout in all; another stopped rank
 *                        is excluded after timeoutMs.
 * comm must still be destroyed or aborted afterwards.
 */
#define COLL_SHRINK_DEFAULT 0x00
#define COLL_SHRINK_ABORT 0x01
#define COLL_SHRINK_DETECT 0x10
COLL_API collResult_t collCommShrink(collComm_t comm, int *excludeRanksList,
                                     int excludeRanksCount, collComm_t *newcomm,
                                     collConfig_t *config, int shrinkFlags);

/*
 * collCommFinalize: waits for every call issued on comm (streams included) to
 * finish and reports the first failure among them; afterwards only
 * collCommDestroy, collCommAbort and the queries are allowed.  On a non-blocking
 * communicator it may return collInProgress (poll collCommGetAsyncError).
 */
COLL_API collResult_t collCommFinalize(collComm_t comm);

/*
 * collCommInitFromEnv: like collCommInitRank, with rank, size and root taken from
 * the environment a launcher sets, first match wins:
 *   COLL_RANK / COLL_NRANKS / COLL_COMM_ID (host:port)         collrun
 *   RANK / WORLD_SIZE / MASTER_ADDR + MASTER_PORT               torchrun
 *   OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE                 Open MPI
 *   SLURM_PROCID / SLURM_NTASKS                                 Slurm
 *   PMI_RANK / PMI_SIZE                                         PMI
 * The root address comes from COLL_COMM_ID, else MASTER_ADDR:MASTER_PORT; rank 0
 * serves it.  Under torchrun (its agent's store at MASTER_ADDR:MASTER_PORT) rank 0
 * serves the root on a port the kernel gives it and publishes it through that store;
 * the others read it there (docs/env.md).  COLL_SECRET, when set, is the secret every
 * connection must show.
 * Returns collInvalidArgument naming a missing or malformed variable, collTimeout or
 * collRemoteError when torchrun's store cannot be used.
 * Thread safety: any thread; several communicators one after the other, in the same
 * order on every rank.
 */
COLL_API collResult_t collCommInitFromEnv(collComm_t *comm);

/*
 * collCommDestroy: frees the communicator after finishing nothing new: it closes
 * connections and joins helper threads.  NULL is accepted.
 * Thread safety: not concurrently with other calls on the same comm.
 */
COLL_API collResult_t collCommDestroy(collComm_t comm);

/*
 * collCommAbort: like collCommDestroy, but makes any call blocked on the
 * communicator in another thread return an error first.  NULL is accepted.
 * Thread safety: may be called from any thread, even while another thread is
 * inside a call on the same comm.
 */
COLL_API collResult_t collCommAbort(collComm_t comm);

/*
 * collCommRevoke (NCCL 2.29's ncclCommRevoke; MPI ULFM's MPIX_Comm_revoke): stops
 * every operation in flight on comm at once, in every thread and on every
 * stream, and tells the other ranks, whose operations on it then fail too.
 * Those operations return collRemoteError; collGetLastError(comm) says
 * "revoked by this rank" here and "revoked by rank R" on the others.  It returns
 * once no call is left inside comm (collInternalError if one in another thread
 * has not returned within 5 s), and comm stays allocated: every later call on it
 * fails at once, and collCommShrink (any flags: a revoked communicator is
 * treated as with COLL_SHRINK_ABORT), collCommDestroy or collCommAbort may
 * follow.  The survivors of a hung or failed peer thus shrink without waiting
 * for their own timeouts.  Revoking twice, or a communicator a peer revoked,
 * is a no-op.  revokeFlags must be 0.
 * Thread safety: any thread, even while another is inside a call on comm.
 */
COLL_API collResult_t collCommRevoke(collComm_t comm, int revokeFlags);

/*
 * collCommGetUniqueId (NCCL 2.29's ncclCommGetUniqueId): on rank 0 of comm, an
 * id for collCommGrow.  It starts a root as collGetUniqueId does, which serves
 * one grow and gives up comm's timeout after the first rank registers.  Hand
 * the id to the processes that will join (by any means); each id works once.
 * Other ranks get collInvalidUsage.
 * Thread safety: as any call on comm.
 */
COLL_API collResult_t collCommGetUniqueId(collComm_t comm, collUniqueId *uniqueId);

/*
 * collCommGrow (NCCL 2.29's ncclCommGrow): a communicator of nRanks ranks made
 * of comm's ranks, which keep their ranks, and nRanks - size(comm) new ones.
 *   - every rank of comm calls it with comm, rank -1, and uniqueId: rank 0 the
 *     id from its collCommGetUniqueId(comm), the others NULL (ignored);
 *   - each new process calls it with comm NULL, that id and its rank, one of
 *     size(comm) .. nRanks - 1 (distinct).
 * All callers get *newcomm; comm is left as it was (destroy it when done).
 * config as in collCommSplit (NULL: comm's settings; a new rank's: defaults).
 * Refused at once, naming the argument: nRanks not above comm's size, rank not
 * -1 on comm's ranks or outside size(comm)..nRanks-1 on a new one, an id not
 * made by collCommGetUniqueId (of this communicator, on its ranks), one used
 * already.  A wrong nRanks on some caller, a duplicate new rank, or a new rank
 * that never comes or dies during the grow fails it on every caller within
 * the timeout, saying why.
 * Thread safety: as collCommSplit.
 */
COLL_API collResult_t collCommGrow(collComm_t comm, int nRanks, const collUniqueId *uniqueId,
                                   int rank, collComm_t *newcomm, collConfig_t *config);

/*
 * collCommGetAsyncError: writes the error that poisoned the communicator (or
 * collSuccess) to *asyncError.
 * Thread safety: any thread.
 */
COLL_API collResult_t collCommGetAsyncError(collComm_t comm, collResult_t *asyncError);

/* collCommCount / collCommUserRank: the number of ranks / this rank.
 * Thread safety: any thread. */
COLL_API collResult_t collCommCount(const collComm_t comm, int *count);
COLL_API collResult_t collCommUserRank(const collComm_t comm, int *rank);

/*
 * collCommGetBytes: bytes this rank has posted to its transports to send to (sent)
 * and to receive from (received) the other ranks of comm since comm was made.
 * Every call on comm counts: the collectives, collSend and collRecv, groups,
 * collAllToAll, collGather and collScatter, blocking or on a stream; and so does
 * the library's own traffic on comm's data path: the measurement of the machine
 * model at init (a few small allreduces and 1 MiB allgathers), COLL_CHECK_MISMATCH's
 * exchange, the small agreements of the direct allreduce, and collCommSplit's two
 * allgathers (counted on the comm that is split).  Every collSend / collRecv
 * message (those of collAllToAll, collGather and collScatter too) carries a
 * 16-byte header, counted on both sides: a send of N bytes counts N + 16.  A
 * rank's copy to itself (a send to itself, its own block of a gather, scatter or
 * all-to-all, the copy of an out-of-place call) is not counted.  Bytes count when
 * they are posted, before they arrive; a receive that the transport lends in
 * place (shared memory, verbs) counts as it is taken.
 * The direct allreduce on collMemAlloc buffers (from COLL_SHM_DIRECT_BYTES) moves
 * its payload by reading the peers' buffers, not through the transports: the
 * bytes this rank reads from the peers count as received, and those the peers
 * read from this rank's buffers as sent (both S + (n - 2) x S_r, where S_r is
 * this rank's segment, about S / n).  So does ll, the small calls through
 * shared slots: (n - 1) x the bytes each rank reads from every other's slot,
 * both ways.
 * Not counted: the bootstrap's out-of-band traffic (registration with the root,
 * the ring, failure notices, collCommShrink's exchange), the transports'
 * connection handshakes and their own control traffic (ring indices and wake-ups
 * of shared memory, verbs credits).
 * A communicator made by collCommSplit or collCommShrink starts at 0 (its own
 * init traffic then counts on it).  Either pointer may be NULL (then not
 * written).  Returns collInvalidArgument for a NULL comm.
 * Thread safety: any thread, while comm is alive; a call still in progress (in
 * another thread or on a stream) may have counted part of its bytes.
 */
COLL_API collResult_t collCommGetBytes(const collComm_t comm, uint64_t *sent, uint64_t *received);

/*
 * What the last call on a communicator used, for collCommGetLastCallInfo.
 * Declare it with COLL_CALL_INFO_INITIALIZER (or set size, magic and version as
 * it does): the library writes only the first `size` bytes, so a program built
 * against this header keeps working with a later library whose struct is longer.
 * The fields, with what they hold when no call has ended on comm yet:
 *   seq         the call's number on comm, as error messages ("allreduce #12")
 *               and the flight record give it; 0: no call yet.
 *   func        the call as logs and error messages name it: "allreduce",
 *               "broadcast", "reduce", "allgather", "reducescatter" (collBarrier
 *               is a one-byte allreduce), or "collSend", "collRecv",
 *               "collAllToAll", "collGather", "collScatter", "group" (the sends
 *               and receives of one collGroupEnd); NULL: no call yet.
 *   algo        the algorithm that ran it: "ring", "tree", "naive", "rd",
 *               "direct", "hier", "ll" (docs/algorithms.md), or "p2p" for the
 *               messages; NULL: no call yet.  Both are static strings.
 *   transports  the transports of the connections the call moved bytes on, in
 *               the order of the transport table, joined by '+': "shm", "tcp",
 *               "shm+tcp".  ll and direct move their bytes through memory the
 *               ranks of a host share, and run only when every peer is over
 *               shared memory: they report every peer's transport.  "" when the
 *               call exchanged nothing with another rank (one rank, a send to
 *               itself, a count of 0 but with ll, whose ranks still meet).
 *   peers       the ranks it exchanged bytes with (0 with "" above).
 *   result      what the call returned (collSuccess, or the failure).
 *   count       its count argument (sendcount / recvcount: elements per rank
 *               for collAllGather and collReduceScatter); for a "group", 0.
 *   datatype    its collDataType_t; -1 for a "group".
 *   op, root    its collRedOp_t and root; -1 for a call that has none.
 *   chunkBytes  the pipelining of ring, tree and naive: the most bytes one piece
 *               of the buffer carries, COLL_CHUNKSIZE (whole elements of it) once
 *               the buffer is large enough, less when a part of the buffer is
 *               smaller than that (the ring cuts the buffer into nranks segments
 *               first; the tree's allreduce into two halves from 64 KiB).
 *   chunks      the pieces the whole buffer of the call is cut into (for
 *               collAllGather and collReduceScatter, all nranks blocks).
 *               Both 0 for a call that is not cut into pieces (ll, rd, direct,
 *               the messages of "p2p", a call that moves nothing) and for hier,
 *               whose levels cut their parts each their own way.
 */
#define COLL_CALL_INFO_TRANSPORTS_BYTES 32
typedef struct {
    size_t size;          /* sizeof(collCallInfo_t), set by the initializer */
    unsigned int magic;   /* COLL_CALL_INFO_MAGIC */
    unsigned int version; /* COLL_VERSION_CODE of the header */
    uint64_t seq;
    const char *func;
    const char *algo;
    char transports[COLL_CALL_INFO_TRANSPORTS_BYTES];
    int peers;
    collResult_t result;
    size_t count;
    int datatype;
    int op;
    int root;
    size_t chunkBytes;
    size_t chunks;
} collCallInfo_t;

#define COLL_CALL_INFO_MAGIC 0xca11cafeu
#define COLL_CALL_INFO_INITIALIZER                                                       \
    {                                                                                    \
        sizeof(collCallInfo_t), COLL_CALL_INFO_MAGIC, COLL_VERSION_CODE, 0, NULL, NULL,  \
            {0}, 0, collSuccess, 0, -1, -1, -1, 0, 0                                     \
    }

/*
 * collCommGetLastCallInfo: describes in *info (see collCallInfo_t) the last call
 * on comm that has ended on this rank: a collective, collSend / collRecv, or the
 * messages of collAllToAll, collGather, collScatter or a group, whether it
 * succeeded or failed (info->result).  With a stream, a call counts once it has
 * run on the progress thread: calls still queued or running are not reported,
 * and with several calls in flight at once (COLL_STREAM_OVERLAP) the one that
 * ended last is.  A call refused at the boundary (collInvalidArgument,
 * collInvalidUsage before it ran) is not a call that ran.  Calls the library
 * makes on comm for its own needs count as calls too: collCommSplit's two
 * allgathers on the comm that is split, collCommGrow's broadcast on the comm
 * that grows.  With no call yet, info->seq is 0 and func and algo are NULL.
 * The strings are static or inside *info.
 * Returns collInvalidArgument, naming the argument, for a NULL comm or info, an
 * info->magic other than COLL_CALL_INFO_MAGIC, or an info->size smaller than the
 * collCallInfo_t above (the first version; later ones only add fields at its
 * end); info is then left as it was.  A poisoned or revoked comm still answers.
 * Thread safety: any thread, while comm is alive; a call ending meanwhile in
 * another thread is reported whole or not at all.
 */
COLL_API collResult_t collCommGetLastCallInfo(const collComm_t comm, collCallInfo_t *info);

/* collGetErrorString: a static message for each result code.
 * Thread safety: any thread. */
COLL_API const char *collGetErrorString(collResult_t result);

/*
 * collGetLastError: the cause of the last failure on comm in words: the bad
 * argument, or the operation with its sequence number, the peer rank with its
 * host:port and the system error text.  With comm NULL, the last failure of the
 * calling thread that had no communicator (for example a failed init).  The
 * string is owned by the library and valid until the next call on comm.
 * Thread safety: as the other calls on comm.
 */
COLL_API const char *collGetLastError(collComm_t comm);

/*
 * Streams.
 *
 * collStreamCreate: a new stream.  A call given a stream (a collective, collSend,
 * collRecv, collAllToAll, collGather, collScatter, or a whole group whose calls
 * all name that stream) is checked at once, returns at once, and runs later on
 * its communicator's progress thread.  The calls on one stream run in the order
 * issued, even when they are on different communicators; the calls on one
 * communicator run in the order issued, whatever their streams, and a call with
 * a NULL stream waits for the communicator's earlier calls before it runs.  The
 * buffers of a call on a stream must stay valid and untouched until the stream
 * is synchronized.  A group on a stream must hold calls of one communicator
 * (else collGroupEnd returns collInvalidUsage).  Returns collInvalidArgument for
 * a NULL stream.  A communicator holds at most 1024 calls queued or running
 * (over all its streams), as a CUDA stream's launch queue does: a call issued
 * beyond that waits until half of them are done, so a program that issues more
 * than 1024 calls before a peer can join them (say, because the peer first waits
 * for this thread's call on another communicator) fails at the timeout instead of
 * running.
 *
 * collStreamQuery: collInProgress while calls issued on the stream are pending;
 * otherwise the first failure among them not yet returned by
 * collStreamSynchronize, or collSuccess.
 * collStreamSynchronize: waits until every call issued on the stream so far is
 * done; returns the first failure among the calls since the last synchronize
 * (and forgets it), or collSuccess.  A failure that poisoned a communicator
 * also shows in collCommGetAsyncError, and its cause in collGetLastError(comm).
 * collStreamDestroy: waits for the calls issued on the stream (their peers
 * expect them), returns as collStreamSynchronize, and frees the stream; NULL is
 * a no-op.  A communicator destroyed with calls still queued on it waits for
 * them too; collCommAbort fails them at once.
 * Any of these given a pointer that is not a live stream returns
 * collInvalidArgument, as does a call given such a stream.
 *
 * Device buffers: a call (collective, send/receive, or a whole group) with a
 * buffer in CUDA device memory (cudaMalloc) takes a cudaStream_t in the same
 * parameter, as NCCL does, and NULL there is CUDA's legacy default stream.  The
 * library tells the two meanings apart by the buffers' memory type, which it
 * asks the CUDA driver the process has loaded; managed memory
 * (cudaMallocManaged) and registered host memory count as host memory.  Such a
 * call returns once its work is enqueued on the CUDA stream: kernels issued on
 * that stream after it see its result, and events order it against other
 * streams.  The device buffers are copied through pinned host memory on that
 * stream and the call runs on the communicator's progress thread in issue
 * order; a failure poisons the communicator (collCommGetAsyncError).  Refused:
 * a collStream_t with device buffers, a buffer that runs past its CUDA
 * allocation, a group with device buffers over several communicators, and a
 * CUDA driver without a call the staging needs (collUnhandledCudaError naming
 * it; the newest is cuStreamWaitValue32_v2, CUDA 11.7).  Ranks that are threads
 * of one process need a stream each: one rank's call holds its stream until
 * the others join.
 * Thread safety: any thread; a stream must not be destroyed while another
 * thread issues calls on it or waits for it.
 */
COLL_API collResult_t collStreamCreate(collStream_t *stream);
COLL_API collResult_t collStreamQuery(collStream_t stream);
COLL_API collResult_t collStreamSynchronize(collStream_t stream);
COLL_API collResult_t collStreamDestroy(collStream_t stream);

/*
 * The collectives.  With stream NULL they block until complete on this rank;
 * with a stream they return at once (see Streams above).  Every rank
 * of comm must make the same calls in the same order with the same count,
 * datatype, op and root.  Every rank receives bitwise the same result.
 * A refused call (collInvalidArgument, collInvalidUsage) leaves comm usable; a
 * system, remote or timeout failure poisons it: later calls return that error
 * and only collCommDestroy / collCommAbort remain.  The failure reaches the
 * other ranks too: their calls on comm in progress or to come fail with
 * collRemoteError within moments (not at their deadline).
 * Thread safety: one thread at a time per comm.
 */

/* collAllReduce: recvbuff[i] = op over ranks of sendbuff[i], for count elements.
 * In place when sendbuff == recvbuff. */
COLL_API collResult_t collAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                                    collDataType_t datatype, collRedOp_t op, collComm_t comm,
                                    collStream_t stream);

/* collBroadcast: copies count elements of root's sendbuff to every rank's recvbuff.
 * In place when sendbuff == recvbuff; sendbuff is read on the root only. */
COLL_API collResult_t collBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                                    collDataType_t datatype, int root, collComm_t comm,
                                    collStream_t stream);

/* collReduce: like collAllReduce with the result on root only; recvbuff may be NULL
 * on the other ranks.  In place when sendbuff == recvbuff. */
COLL_API collResult_t collReduce(const void *sendbuff, void *recvbuff, size_t count,
                                 collDataType_t datatype, collRedOp_t op, int root,
                                 collComm_t comm, collStream_t stream);

/* collAllGather: recvbuff (nranks * sendcount elements) gets each rank r's sendbuff
 * at offset r * sendcount.  In place when sendbuff == recvbuff + rank * sendcount. */
COLL_API collResult_t collAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                                    collDataType_t datatype, collComm_t comm,
                                    collStream_t stream);

/* collReduceScatter: sendbuff holds nranks * recvcount elements; rank r receives in
 * recvbuff the reduction of block r.  In place when recvbuff == sendbuff + rank *
 * recvcount. */
COLL_API collResult_t collReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                        collDataType_t datatype, collRedOp_t op,
                                        collComm_t comm, collStream_t stream);

/* collBarrier (not in NCCL; as MPI_Barrier and Gloo's barrier): returns once every
 * rank of comm has called it.  It is a one-byte allreduce (max) of a byte the
 * communicator keeps, so it takes what a tiny allreduce takes (the shared-memory
 * slots among the ranks of one host) and shows as such in logs and the flight
 * record.  With a stream it is queued there like the collectives. */
COLL_API collResult_t collBarrier(collComm_t comm, collStream_t stream);

/*
 * Point-to-point calls and groups.
 *
 * collSend / collRecv: sends count elements of sendbuff to rank peer / receives
 * count elements from rank peer into recvbuff.  The two sides must give the same
 * number of bytes: a receive that finds a message of another size fails with
 * collInvalidUsage naming both sizes and the peer, and poisons comm so that the
 * sender fails too instead of waiting.  Messages between two ranks arrive in the
 * order they were sent, and a receive takes the next message from its peer.
 * Outside a group each call blocks until its message is complete; a rank may
 * send to or receive from itself only inside a group holding both sides.
 * peer must be in [0, nranks); a NULL buffer is allowed only with count 0.  With
 * a stream the call is queued there (see Streams).  Results as the collectives:
 * collInvalidArgument names the bad argument in collGetLastError and leaves comm
 * usable; system, remote, timeout and size-mismatch failures poison it.
 * Thread safety: one thread at a time per comm.
 */
COLL_API collResult_t collSend(const void *sendbuff, size_t count, collDataType_t datatype,
                               int peer, collComm_t comm, collStream_t stream);
COLL_API collResult_t collRecv(void *recvbuff, size_t count, collDataType_t datatype, int peer,
                               collComm_t comm, collStream_t stream);

/*
 * collRecvAny (not in NCCL; as MPI_Recv from MPI_ANY_SOURCE, and Gloo's receive from
 * any source): receives count elements into recvbuff from whichever rank's message
 * to this rank comes first, and writes that rank to *peer once the call is done (with
 * a stream: by the time the stream is; not written on a failure).  Any collSend to
 * this rank can match it, as it would match a collRecv from the sender, with the same
 * rule on sizes; the messages of each sender still arrive in the order sent, and
 * the ranks' connections are looked at from the one after this rank on.  It finds the
 * message by looking at what has arrived on each rank's connection without taking it
 * (a sleep of 50 us to 1 ms between rounds), under the communicator's deadline.
 * Host buffers only (device memory: collInvalidArgument), and not inside a group
 * (collInvalidUsage).  Results as collRecv; a NULL peer is collInvalidArgument.
 * Thread safety: as collRecv.
 */
COLL_API collResult_t collRecvAny(void *recvbuff, size_t count, collDataType_t datatype,
                                  int *peer, collComm_t comm, collStream_t stream);

/*
 * collGroupStart / collGroupEnd: between them, collSend, collRecv, collAllToAll,
 * collGather, collScatter and the collectives of the calling thread are queued
 * instead of run, and collGroupEnd issues them all: the sends and receives
 * progress together (so a rank may exchange with many peers in any order
 * without deadlock), then the collectives run in the order they were issued.
 * A group may span several communicators.  Groups nest; only the outermost
 * collGroupEnd issues anything.  A call refused inside the group returns its
 * error at once, and collGroupEnd then returns that error and issues nothing of
 * the group; a failure while the group runs is returned by collGroupEnd and
 * drops the calls not yet run.  A send buffer may overlap a receive buffer of
 * the same group: the bytes sent are those before any receive.  collGroupEnd
 * without collGroupStart returns collInvalidUsage.
 * Thread safety: the group is per thread; each comm in it as its calls require.
 */
COLL_API collResult_t collGroupStart(void);
COLL_API collResult_t collGroupEnd(void);

/*
 * collAlltoAll (NCCL's spelling, ncclAlltoAll): block j (count elements) of
 * sendbuff goes to rank j, and block i of recvbuff comes from rank i; both
 * buffers hold nranks * count elements.  In place when sendbuff == recvbuff.
 * Runs as a group of sends and receives (inside an open group, it joins that
 * group).  Results and thread safety as collSend.  collAllToAll is the same call
 * under the name of earlier versions.
 */
COLL_API collResult_t collAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                                   collDataType_t datatype, collComm_t comm,
                                   collStream_t stream);
COLL_API collResult_t collAllToAll(const void *sendbuff, void *recvbuff, size_t count,
                                   collDataType_t datatype, collComm_t comm,
                                   collStream_t stream);

/*
 * collGather: every rank sends count elements of sendbuff to root; on root,
 * recvbuff (nranks * count elements) gets rank r's elements at offset r * count.
 * recvbuff is not used off the root and may be NULL there.  In place when
 * sendbuff == recvbuff + root * count on the root.
 * collScatter: block r (count elements) of root's sendbuff (nranks * count
 * elements) goes to rank r's recvbuff (count elements).  sendbuff is not used
 * off the root and may be NULL there.  In place when recvbuff == sendbuff +
 * root * count on the root.
 * Every rank must pass the same count, datatype and root, in [0, nranks).  Both
 * run as a group of sends and receives, the root's with every rank (inside an
 * open group, they join that group).  Results and thread safety as collSend.
 */
COLL_API collResult_t collGather(const void *sendbuff, void *recvbuff, size_t count,
                                 collDataType_t datatype, int root, collComm_t comm,
                                 collStream_t stream);
COLL_API collResult_t collScatter(const void *sendbuff, void *recvbuff, size_t count,
                                  collDataType_t datatype, int root, collComm_t comm,
                                  collStream_t stream);

/*
 * collMemAlloc: size bytes (rounded up to pages) of memory that the other ranks on
 * this host can map, like ncclMemAlloc.  An allreduce whose sendbuff and recvbuff
 * lie in such memory on every rank, with every rank on one host, reads the peers'
 * buffers where they are instead of passing the bytes through the shared-memory
 * slots (from COLL_SHM_DIRECT_BYTES up).  Any other buffer works as before;
 * after a call in which some rank's buffer was not such memory, the next 63
 * calls large enough take the slots without asking.
 * collInvalidArgument for a NULL ptr or a size of 0; collSystemError, naming shared
 * memory and /dev/shm, when the memory cannot be reserved.
 * collMemFree: frees memory from collMemAlloc; NULL is a no-op; any other pointer
 * is collInvalidArgument.  A peer that mapped the buffer keeps its mapping (not the
 * data's meaning) until its communicator is destroyed or the mapping is evicted.
 * Thread safety: both may be called from any thread.
 */
COLL_API collResult_t collMemAlloc(void **ptr, size_t size);
COLL_API collResult_t collMemFree(void *ptr);

/*
 * collCommRegister: tells comm that [buff, buff + size) (bytes) will be passed
 * to its calls, like ncclCommRegister: over a transport that moves registered
 * memory in place (verbs: RDMA straight between the ranks' buffers, from
 * COLL_IB_RDV_BYTES), sends from it and receives into it skip the staging
 * copies.  The transports register it on first use, once per region; memory
 * from collMemAlloc needs no call (it is known already).  Any other buffer
 * works as before.  *handle names the registration for collCommDeregister.
 * The buffer must stay allocated, at the same address, until then: memory freed
 * and reallocated while registered may be read as it was.  Registering the
 * same or overlapping ranges again is allowed; each handle is deregistered on
 * its own.  Registrations left when comm is destroyed are released with it.
 * collInvalidArgument for a NULL comm, buff or handle, a size of 0, or a range
 * past the end of the address space; a poisoned comm returns its error.
 * collCommDeregister: releases the registration (its transport registrations
 * at once); collInvalidArgument for a NULL comm or a handle this comm did not
 * return (or already released).  Both wait for the calls queued on comm's
 * streams first, as a call without a stream does.
 * Thread safety: like any call on comm (one thread at a time).
 */
COLL_API collResult_t collCommRegister(const collComm_t comm, void *buff, size_t size,
                                       void **handle);
COLL_API collResult_t collCommDeregister(const collComm_t comm, void *handle);

#ifdef __cplusplus
}
#endif

#endif /* COLLECTIVE_H */
