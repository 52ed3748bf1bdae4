/*
 * The model's cut over the tensor and pipeline dimensions of the grid.
 *
 * A rank's layers lie one after the other in its own parameter array, each as W
 * (its rows x its columns, row-major) then b, as in the whole layout; a split
 * layer's W is the block of the whole W:
 *
 *   MLP_COLS, rank t of T:  columns [t*nout/T, (t+1)*nout/T), and that part of b
 *   MLP_ROWS, rank t of T:  rows    [t*nin/T,  (t+1)*nin/T),  and all of b
 *
 * A stage boundary may fall between the two layers of a pair: the message between
 * the stages is then rank t's block of the units, from tensor rank t of one stage
 * to tensor rank t of the next, and its gradient comes back the same way.
 */
#include "partition.h"

#include <stdio.h>
#include <string.h>

/* Multiply-adds per example of layer l as held by one tensor rank. */
static double layer_cost(const struct partition *pt, int l)
{
    double c = (double)pt->sizes[l] * (double)pt->sizes[l + 1];
    return pt->split[l] == MLP_WHOLE ? c : c / pt->T;
}

/* Contiguous stages minimising the costliest (a small dynamic programme: best[p][l]
 * is the least maximum over p stages holding the first l layers). */
static void plan_stages(struct partition *pt)
{
    int n = pt->nlayers, P = pt->P;
    double best[PART_MAX_STAGES + 1][PART_MAX_LAYERS + 1];
    int cut[PART_MAX_STAGES + 1][PART_MAX_LAYERS + 1];
    for (int p = 0; p <= P; p++)
        for (int l = 0; l <= n; l++)
            best[p][l] = -1.0;
    best[0][0] = 0.0;
    for (int p = 1; p <= P; p++)
        for (int l = p; l <= n - (P - p); l++)
            for (int k = p - 1; k < l; k++) {
                if (best[p - 1][k] < 0.0)
                    continue;
                double c = 0.0;
                for (int j = k; j < l; j++)
                    c += layer_cost(pt, j);
                double worst = c > best[p - 1][k] ? c : best[p - 1][k];
                if (best[p][l] < 0.0 || worst < best[p][l]) {
                    best[p][l] = worst;
                    cut[p][l] = k;
                }
            }
    pt->stage_first[P] = n;
    for (int p = P, l = n; p > 0; p--) {
        l = cut[p][l];
        pt->stage_first[p - 1] = l;
    }
}

int part_plan(struct partition *pt, int nlayers, const int *sizes, int T, int P, char *err,
              size_t errlen)
{
    memset(pt, 0, sizeof(*pt));
    pt->nlayers = nlayers;
    pt->T = T;
    pt->P = P;
    memcpy(pt->sizes, sizes, (size_t)(nlayers + 1) * sizeof(int));
    pt->whole_nparams = mlp_whole_layers(nlayers, sizes, pt->whole);
    int nhidden = nlayers - 1;
    if (T > 1 && nhidden < 2) {
        snprintf(err, errlen, "--tp: %d needs hidden layers in pairs (a column-split layer "
                 "and a row-split one), and --hidden gives %d", T, nhidden);
        return -1;
    }
    for (int l = 0; l < nlayers; l++)
        pt->split[l] = MLP_WHOLE;
    if (T > 1)
        for (int k = 0; 2 * k + 1 < nhidden; k++) {
            int w = sizes[2 * k + 1];
            if (w % T != 0) {
                snprintf(err, errlen, "--tp: %d does not divide the width %d of hidden layer "
                         "%d (--hidden), which the tensor group splits", T, w, 2 * k + 1);
                return -1;
            }
            pt->split[2 * k] = MLP_COLS;
            pt->split[2 * k + 1] = MLP_ROWS;
        }
    if (P > nlayers) {
        snprintf(err, errlen, "--pp: %d stages need at least %d weight layers, and the model "
                 "has %d (%d hidden layers from --hidden, and the output layer)", P, P,
                 nlayers, nhidden);
        return -1;
    }
    plan_stages(pt);
    return 0;
}

int part_layers(const struct partition *pt, int p, struct mlp_layer *layer, size_t *nparams_p)
{
    size_t off = 0;
    int n = 0;
    for (int l = pt->stage_first[p]; l < pt->stage_first[p + 1]; l++, n++) {
        struct mlp_layer *L = &layer[n];
        *L = pt->whole[l];
        L->split = pt->split[l];
        if (L->split == MLP_COLS)
            L->nout /= pt->T;
        else if (L->split == MLP_ROWS)
            L->nin /= pt->T;
        L->w = off;
        L->b = off + (size_t)L->nin * (size_t)L->nout;
        off = L->b + (size_t)L->nout;
    }
    *nparams_p = off;
    return n;
}

size_t part_nparams(const struct partition *pt, int p)
{
    struct mlp_layer layer[PART_MAX_LAYERS];
    size_t n;
    part_layers(pt, p, layer, &n);
    return n;
}

void part_copy(const struct partition *pt, int t, int p, float *whole, float *local,
               bool to_local)
{
    struct mlp_layer mine[PART_MAX_LAYERS];
    size_t n;
    int nl = part_layers(pt, p, mine, &n);
    for (int i = 0; i < nl; i++) {
        const struct mlp_layer *W = &pt->whole[pt->stage_first[p] + i], *L = &mine[i];
        /* the block's first row and column in the whole W, and of b */
        size_t r0 = L->split == MLP_ROWS ? (size_t)t * (size_t)L->nin : 0;
        size_t c0 = L->split == MLP_COLS ? (size_t)t * (size_t)L->nout : 0;
        size_t row = (size_t)L->nout * sizeof(float);
        for (size_t k = 0; k < (size_t)L->nin; k++) {
            float *wp = whole + W->w + (r0 + k) * (size_t)W->nout + c0;
            float *lp = local + L->w + k * (size_t)L->nout;
            if (to_local)
                memcpy(lp, wp, row);
            else
                memcpy(wp, lp, row);
        }
        if (to_local)
            memcpy(local + L->b, whole + W->b + c0, row);
        else
            memcpy(whole + W->b + c0, local + L->b, row);
    }
}
