/*
 * The perceptron's maths: forward, softmax cross-entropy, backward, for whole
 * layers and for the column and row blocks of a tensor-parallel split.
 *
 * Loops are ordered so that the innermost one walks memory contiguously:
 *   forward   Y[i,:] += X[i,k] * W[k,:]           (i-k-j)
 *   dW        dW[k,:] += X[i,k] * dY[i,:]          (i-k-j)
 *   dX        dX[i,k] = dot(dY[i,:], W[k,:])       (both rows contiguous)
 * A zero input (most ReLU outputs) adds nothing, so it is skipped; the sums are
 * bitwise the same with or without the skip.
 *
 * Tensor parallelism (Megatron's pair of layers, docs/parallelism.md):
 *   MLP_COLS  Y_t = X W[:, block t] + b[block t]        no communication forward;
 *             dX = sum over t of dY_t W[:, block t]^T    one sum over the group
 *   MLP_ROWS  Y = sum over t of X_t W[block t, :] + b    one sum over the group;
 *             dX_t = dY W[block t, :]^T                  no communication backward
 * ReLU is elementwise, so it applies to a block as it would to the whole.
 *
 * Backward writes each layer's gradient into its own range of grads and then calls
 * the caller back, last layer first: the trainer launches a bucket's allreduce there
 * while the earlier layers are still being computed.
 */
#include "mlp.h"
#include "rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

size_t mlp_whole_layers(int nlayers, const int *sizes, struct mlp_layer *layer)
{
    size_t off = 0;
    for (int l = 0; l < nlayers; l++) {
        struct mlp_layer *L = &layer[l];
        L->nin = sizes[l];
        L->nout = sizes[l + 1];
        L->split = MLP_WHOLE;
        L->relu = l + 1 < nlayers;
        L->w = off;
        L->b = off + (size_t)L->nin * (size_t)L->nout;
        off = L->b + (size_t)L->nout;
    }
    return off;
}

void mlp_free(struct mlp *m)
{
    if (m->act != NULL)
        for (int s = 0; s < m->nslots; s++) {
            if (m->act[s] != NULL)
                for (int i = 0; i < m->nlayers; i++)
                    free(m->act[s][i]);
            free(m->act[s]);
        }
    free(m->act);
    free(m->in);
    free(m->dtop);
    free(m->dbuf[0]);
    free(m->dbuf[1]);
    free(m->layer);
    memset(m, 0, sizeof(*m));
}

int mlp_init(struct mlp *m, int nlayers, const struct mlp_layer *layer, size_t maxrows,
             int nslots)
{
    memset(m, 0, sizeof(*m));
    m->nlayers = nlayers;
    m->maxrows = maxrows;
    m->nslots = nslots;
    m->layer = malloc((size_t)nlayers * sizeof(*layer));
    m->act = calloc((size_t)nslots, sizeof(float **));
    m->in = calloc((size_t)nslots, sizeof(float *));
    if (m->layer == NULL || m->act == NULL || m->in == NULL)
        goto fail;
    memcpy(m->layer, layer, (size_t)nlayers * sizeof(*layer));
    size_t widest = 0;
    for (int i = 0; i < nlayers; i++) {
        size_t end = layer[i].b + (size_t)layer[i].nout;
        if (end > m->nparams)
            m->nparams = end;
        if ((size_t)layer[i].nin > widest)
            widest = (size_t)layer[i].nin;
        if ((size_t)layer[i].nout > widest)
            widest = (size_t)layer[i].nout;
    }
    for (int s = 0; s < nslots; s++) {
        if ((m->act[s] = calloc((size_t)nlayers, sizeof(float *))) == NULL)
            goto fail;
        for (int i = 0; i < nlayers; i++)
            if ((m->act[s][i] = malloc(maxrows * (size_t)layer[i].nout * sizeof(float))) ==
                NULL)
                goto fail;
    }
    m->dtop = malloc(maxrows * (size_t)layer[nlayers - 1].nout * sizeof(float));
    if (m->dtop == NULL)
        goto fail;
    for (int i = 0; i < 2; i++)
        if ((m->dbuf[i] = malloc(maxrows * widest * sizeof(float))) == NULL)
            goto fail;
    return 0;
fail:
    mlp_free(m);
    return -1;
}

void mlp_init_params(const struct mlp_layer *layer, int nlayers, uint64_t *rng, float *params)
{
    for (int l = 0; l < nlayers; l++) {
        size_t nin = (size_t)layer[l].nin, nout = (size_t)layer[l].nout;
        /* Kaiming uniform: keeps the variance of ReLU activations layer to layer. */
        double bound = sqrt(6.0 / (double)nin);
        float *w = params + layer[l].w;
        for (size_t i = 0; i < nin * nout; i++)
            w[i] = (float)((2.0 * rng_uniform(rng) - 1.0) * bound);
        memset(params + layer[l].b, 0, nout * sizeof(float));
    }
}

static void relu_rows(float *y, size_t n)
{
    for (size_t j = 0; j < n; j++)
        y[j] = y[j] > 0.0f ? y[j] : 0.0f;
}

/* y = x W + b (b NULL: no bias) for rows rows, then ReLU when relu is set. */
static void layer_forward(const float *restrict x, const float *restrict w,
                          const float *restrict b, float *restrict y, size_t rows, size_t nin,
                          size_t nout, bool relu)
{
    for (size_t i = 0; i < rows; i++) {
        float *yi = y + i * nout;
        if (b != NULL)
            memcpy(yi, b, nout * sizeof(float));
        else
            memset(yi, 0, nout * sizeof(float));
        const float *xi = x + i * nin;
        for (size_t k = 0; k < nin; k++) {
            float a = xi[k];
            if (a == 0.0f)
                continue;
            const float *wk = w + k * nout;
            for (size_t j = 0; j < nout; j++)
                yi[j] += a * wk[j];
        }
        if (relu)
            relu_rows(yi, nout);
    }
}

void mlp_forward(struct mlp *m, int s, const float *params, const float *x, size_t rows)
{
    m->in[s] = x;
    for (int i = 0; i < m->nlayers; i++) {
        const struct mlp_layer *L = &m->layer[i];
        const float *in = i == 0 ? x : m->act[s][i - 1];
        float *y = m->act[s][i];
        size_t nout = (size_t)L->nout;
        if (L->split != MLP_ROWS) {
            layer_forward(in, params + L->w, params + L->b, y, rows, (size_t)L->nin, nout,
                          L->relu);
            continue;
        }
        /* this rank's share of the product; the bias once, after the sum */
        layer_forward(in, params + L->w, NULL, y, rows, (size_t)L->nin, nout, false);
        m->reduce(y, rows * nout, m->reduce_ctx);
        const float *b = params + L->b;
        for (size_t r = 0; r < rows; r++) {
            float *yr = y + r * nout;
            for (size_t j = 0; j < nout; j++)
                yr[j] += b[j];
            if (L->relu)
                relu_rows(yr, nout);
        }
    }
}

const float *mlp_output(const struct mlp *m, int s)
{
    return m->act[s][m->nlayers - 1];
}

double mlp_loss(struct mlp *m, int s, const int *y, size_t rows, int want_grad, long *correct)
{
    size_t nc = (size_t)m->layer[m->nlayers - 1].nout;
    const float *logits = mlp_output(m, s);
    float *dl = m->dtop;
    double total = 0.0;
    for (size_t i = 0; i < rows; i++) {
        const float *z = logits + i * nc;
        size_t best = 0;
        for (size_t j = 1; j < nc; j++)
            if (z[j] > z[best])
                best = j;
        *correct += best == (size_t)y[i];
        /* log-sum-exp shifted by the largest logit, so exp never overflows */
        double sum = 0.0;
        for (size_t j = 0; j < nc; j++)
            sum += exp((double)z[j] - (double)z[best]);
        double lse = (double)z[best] + log(sum);
        total += lse - (double)z[y[i]];
        if (want_grad) {
            float *d = dl + i * nc;
            for (size_t j = 0; j < nc; j++)
                d[j] = (float)exp((double)z[j] - lse);
            d[y[i]] -= 1.0f;
        }
    }
    return total;
}

/* dW = X^T dY and db = column sums of dY, written into (or, with accumulate, added
 * to) dw and db. */
static void layer_grad(const float *restrict x, const float *restrict dy, float *restrict dw,
                       float *restrict db, size_t rows, size_t nin, size_t nout, bool accumulate)
{
    if (!accumulate) {
        memset(dw, 0, nin * nout * sizeof(float));
        memset(db, 0, nout * sizeof(float));
    }
    for (size_t i = 0; i < rows; i++) {
        const float *xi = x + i * nin, *dyi = dy + i * nout;
        for (size_t k = 0; k < nin; k++) {
            float a = xi[k];
            if (a == 0.0f)
                continue;
            float *dwk = dw + k * nout;
            for (size_t j = 0; j < nout; j++)
                dwk[j] += a * dyi[j];
        }
        for (size_t j = 0; j < nout; j++)
            db[j] += dyi[j];
    }
}

/* dX = dY W^T, masked by the ReLU that produced x (x > 0). */
static void layer_dx(const float *restrict x, const float *restrict dy, const float *restrict w,
                     float *restrict dx, size_t rows, size_t nin, size_t nout)
{
    for (size_t i = 0; i < rows; i++) {
        const float *dyi = dy + i * nout, *xi = x + i * nin;
        float *dxi = dx + i * nin;
        for (size_t k = 0; k < nin; k++) {
            if (xi[k] <= 0.0f) {
                dxi[k] = 0.0f;
                continue;
            }
            const float *wk = w + k * nout;
            float s = 0.0f;
            for (size_t j = 0; j < nout; j++)
                s += dyi[j] * wk[j];
            dxi[k] = s;
        }
    }
}

void mlp_backward(struct mlp *m, int s, const float *params, size_t rows, float *grads,
                  bool accumulate, mlp_layer_done_fn done, void *ctx)
{
    for (int i = m->nlayers - 1; i >= 0; i--) {
        const struct mlp_layer *L = &m->layer[i];
        size_t nin = (size_t)L->nin, nout = (size_t)L->nout;
        const float *x = i == 0 ? m->in[s] : m->act[s][i - 1];
        const float *dy = i == m->nlayers - 1 ? m->dtop : m->dbuf[i % 2];
        layer_grad(x, dy, grads + L->w, grads + L->b, rows, nin, nout, accumulate);
        if (done != NULL)
            done(i, ctx);
        /* The model's input gradient is never needed. */
        if (i == 0 && !m->want_dx)
            break;
        float *dx = m->dbuf[(i + 1) % 2];
        layer_dx(x, dy, params + L->w, dx, rows, nin, nout);
        if (L->split == MLP_COLS)
            m->reduce(dx, rows * nin, m->reduce_ctx);
        if (i == 0)
            m->dx = dx;
    }
}
