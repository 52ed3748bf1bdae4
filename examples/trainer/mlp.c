/*
 * The perceptron's maths: forward, softmax cross-entropy, backward.
 *
 * Loops are ordered so that the innermost one walks memory contiguously:
 *   forward   Y[i,:] += X[i,k] * W[k,:]           (i-k-j)
 *   dW        dW[k,:] += X[i,k] * dY[i,:]          (i-k-j)
 *   dX        dX[i,k] = dot(dY[i,:], W[k,:])       (both rows contiguous)
 * A zero input (most ReLU outputs) adds nothing, so it is skipped; the sums are
 * bitwise the same with or without the skip.
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

size_t mlp_weight_offset(const struct mlp *m, int l)
{
    return m->off[l];
}

size_t mlp_bias_offset(const struct mlp *m, int l)
{
    return m->off[l] + (size_t)m->sizes[l] * (size_t)m->sizes[l + 1];
}

void mlp_free(struct mlp *m)
{
    if (m->act != NULL)
        for (int l = 0; l <= m->nlayers; l++)
            free(m->act[l]);
    free(m->act);
    free(m->dbuf[0]);
    free(m->dbuf[1]);
    free(m->sizes);
    free(m->off);
    memset(m, 0, sizeof(*m));
}

int mlp_init(struct mlp *m, int nlayers, const int *sizes, size_t maxrows)
{
    memset(m, 0, sizeof(*m));
    m->nlayers = nlayers;
    m->maxrows = maxrows;
    m->sizes = malloc((size_t)(nlayers + 1) * sizeof(int));
    m->off = malloc((size_t)(nlayers + 1) * sizeof(size_t));
    m->act = calloc((size_t)(nlayers + 1), sizeof(float *));
    if (m->sizes == NULL || m->off == NULL || m->act == NULL)
        goto fail;
    memcpy(m->sizes, sizes, (size_t)(nlayers + 1) * sizeof(int));
    size_t widest = 0, off = 0;
    for (int l = 0; l <= nlayers; l++) {
        m->off[l] = off;
        if (l < nlayers)
            off += ((size_t)sizes[l] + 1) * (size_t)sizes[l + 1];
        if ((size_t)sizes[l] > widest)
            widest = (size_t)sizes[l];
    }
    m->nparams = off;
    for (int l = 1; l <= nlayers; l++)
        if ((m->act[l] = malloc(maxrows * (size_t)sizes[l] * sizeof(float))) == NULL)
            goto fail;
    for (int i = 0; i < 2; i++)
        if ((m->dbuf[i] = malloc(maxrows * widest * sizeof(float))) == NULL)
            goto fail;
    return 0;
fail:
    mlp_free(m);
    return -1;
}

void mlp_init_params(const struct mlp *m, uint64_t *rng, float *params)
{
    for (int l = 0; l < m->nlayers; l++) {
        size_t nin = (size_t)m->sizes[l], nout = (size_t)m->sizes[l + 1];
        /* Kaiming uniform: keeps the variance of ReLU activations layer to layer. */
        double bound = sqrt(6.0 / (double)nin);
        float *w = params + mlp_weight_offset(m, l);
        for (size_t i = 0; i < nin * nout; i++)
            w[i] = (float)((2.0 * rng_uniform(rng) - 1.0) * bound);
        memset(params + mlp_bias_offset(m, l), 0, nout * sizeof(float));
    }
}

/* y = x W + b for rows rows, then ReLU when relu is set. */
static void layer_forward(const float *restrict x, const float *restrict w,
                          const float *restrict b, float *restrict y, size_t rows, size_t nin,
                          size_t nout, int relu)
{
    for (size_t i = 0; i < rows; i++) {
        float *yi = y + i * nout;
        memcpy(yi, b, nout * sizeof(float));
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
            for (size_t j = 0; j < nout; j++)
                yi[j] = yi[j] > 0.0f ? yi[j] : 0.0f;
    }
}

void mlp_forward(struct mlp *m, const float *params, const float *x, size_t rows)
{
    m->in = x;
    for (int l = 0; l < m->nlayers; l++) {
        const float *in = l == 0 ? x : m->act[l];
        layer_forward(in, params + mlp_weight_offset(m, l), params + mlp_bias_offset(m, l),
                      m->act[l + 1], rows, (size_t)m->sizes[l], (size_t)m->sizes[l + 1],
                      l + 1 < m->nlayers);
    }
}

/* The buffer holding the gradient with respect to layer l's output. */
static float *dout(struct mlp *m, int l)
{
    return m->dbuf[l % 2];
}

double mlp_loss(struct mlp *m, const int *y, size_t rows, int want_grad, long *correct)
{
    size_t nc = (size_t)m->sizes[m->nlayers];
    const float *logits = m->act[m->nlayers];
    float *dl = dout(m, m->nlayers - 1);
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

/* dW = X^T dY and db = column sums of dY, written (not added) into w and b. */
static void layer_grad(const float *restrict x, const float *restrict dy, float *restrict dw,
                       float *restrict db, size_t rows, size_t nin, size_t nout)
{
    memset(dw, 0, nin * nout * sizeof(float));
    memset(db, 0, nout * sizeof(float));
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

void mlp_backward(struct mlp *m, const float *params, size_t rows, float *grads,
                  mlp_layer_done_fn done, void *ctx)
{
    for (int l = m->nlayers - 1; l >= 0; l--) {
        size_t nin = (size_t)m->sizes[l], nout = (size_t)m->sizes[l + 1];
        const float *x = l == 0 ? m->in : m->act[l];
        layer_grad(x, dout(m, l), grads + mlp_weight_offset(m, l),
                   grads + mlp_bias_offset(m, l), rows, nin, nout);
        if (done != NULL)
            done(l, ctx);
        /* The input layer's dX is never needed. */
        if (l > 0)
            layer_dx(x, dout(m, l), params + mlp_weight_offset(m, l), dout(m, l - 1), rows,
                     nin, nout);
    }
}
