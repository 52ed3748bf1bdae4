/*
 * MPI_Barrier timed as barrier_perf times collBarrier, for perf/barrier_bench.sh:
 * warm-up, then iters barriers between two clock reads, the time per barrier
 * averaged over the ranks, printed by rank 0 in microseconds.  Built with mpicc
 * by that script (not by meson: Open MPI is a benchmark peer, not a dependency).
 *
 *   mpirun -np 4 mpi_barrier [iters] [warmup]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int iters = argc > 1 ? atoi(argv[1]) : 20000;
    int warmup = argc > 2 ? atoi(argv[2]) : 500;
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    for (int i = 0; i < warmup; i++)
        MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; i++)
        MPI_Barrier(MPI_COMM_WORLD);
    double us = (MPI_Wtime() - t0) * 1e6 / iters, sum = 0;
    MPI_Reduce(&us, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("mpi_barrier n=%d iters=%d time_us %.3f\n", n, iters, sum / n);
    MPI_Finalize();
    return 0;
}
