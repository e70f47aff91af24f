/* cuTile's array ABI (OP_TILE_ARRAY): a tensor as its data pointer, extents and strides in elements,
 * after every promise of the kernel's ArrayConstraint held; anything else goes to the Python
 * executor, whose converter (launchpad/frontends/cutile/args.py) applies the same rules and words
 * the refusal. Warp's array_t (OP_WARP_ARRAY) follows. */
#include "claunch.h"

#include <string.h>

/* cuTile's test that no two indices reach one element: sorted by stride, the smallest stride is
 * positive and each stride at least the previous one times its extent. */
static int tile_disjoint(const int64_t *shape, const int64_t *strides, int ndim) {
    int64_t s[32], n[32];
    for (int i = 0; i < ndim; i++) {  /* insertion sort of (stride, extent) pairs */
        int j = i;
        while (j > 0 && (s[j - 1] > strides[i] || (s[j - 1] == strides[i] && n[j - 1] > shape[i]))) {
            s[j] = s[j - 1];
            n[j] = n[j - 1];
            j--;
        }
        s[j] = strides[i];
        n[j] = shape[i];
    }
    if (ndim && s[0] <= 0) return 0;
    for (int i = 0; i + 1 < ndim; i++) {
        if (n[i] != 0 && s[i] > INT64_MAX / n[i]) return 0;  /* the product passes every int64 stride */
        if (s[i + 1] < s[i] * n[i]) return 0;
    }
    return 1;
}

/* cuTile's array ABI from a tensor: its data pointer, extents and strides (in elements), each as
 * wide as its slot, after every promise of the kernel's ArrayConstraint held
 * (launchpad/frontends/cutile/args.py words the refusals). */
int lp_run_tile_array(Launch *L, const Op *op, PyObject *value) {
    DLTensor t;
    if (lp_read_tensor(L->self->api, L->self->tensor_types, value, &t) != LP_OK || !lp_on_device(&t, L->device)) return LP_FALLBACK;
    if (lp_dtype_word(&t) != op->dtype || t.ndim != op->ndim || t.ndim > 32) return LP_FALLBACK;
    uint64_t address = (uint64_t)(uintptr_t)t.data + t.byte_offset;
    if (op->align > 1 && !lp_multiple_u(address, (uint64_t)op->align)) return LP_FALLBACK;
    int64_t strides[32], expected = 1;
    for (int d = t.ndim - 1; d >= 0; d--) {  /* no strides: compact row-major */
        strides[d] = t.strides ? t.strides[d] : expected;
        expected *= t.shape[d];
    }
    for (int d = 0; d < t.ndim; d++) {
        const int64_t *c = op->dims + 5 * d;
        int64_t n = t.shape[d], s = strides[d];
        if (!lp_multiple_s(n, c[0]) || (c[1] != LP_NONE && n != c[1]) || !lp_multiple_s(s, c[2]) ||
            (c[3] != LP_NONE && s != c[3]) || (c[4] != LP_NONE && s < c[4]) || n < op->size || n > op->multiple_of ||
            s < op->size || s > op->multiple_of)
            return LP_FALLBACK;
    }
    if ((op->flags & 1) && !tile_disjoint(t.shape, strides, t.ndim)) return LP_FALLBACK;
    memcpy(L->buffer + op->slots[0].offset, &address, 8);
    for (int d = 0; d < t.ndim; d++) {
        const Slot *extent = &op->slots[1 + d], *stride = &op->slots[1 + t.ndim + d];
        memcpy(L->buffer + extent->offset, &t.shape[d], extent->size);  /* little-endian: the low bytes */
        memcpy(L->buffer + stride->offset, &strides[d], stride->size);
    }
    return LP_OK;
}

/* Warp's array ABI (OP_WARP_ARRAY): ``wp::array_t``, one by-value struct of 56 bytes, ``{u64 data;
 * u64 grad; i32 shape[4]; i32 strides[4] (bytes); u16 ndim; u16 flags}`` (its layout in Warp's
 * ``warp.types.array_t``; launchpad/frontends/warp/args.py packs the same in Python and words the
 * refusals). An array of vectors or matrices is a tensor with the element type's extents as its
 * last dimensions, compact; the array's shape and strides are those of the dimensions before. */
typedef struct {
    uint64_t data, grad;
    int32_t shape[4], strides[4];
    uint16_t ndim, flags;
    uint32_t pad;
} WarpArray;

int lp_run_warp_array(Launch *L, const Op *op, PyObject *value) {
    DLTensor t;
    if (lp_read_tensor(L->self->api, L->self->tensor_types, value, &t) != LP_OK || !lp_on_device(&t, L->device)) return LP_FALLBACK;
    int inner = op->flags;
    if (lp_dtype_word(&t) != op->dtype || t.ndim != op->ndim + inner) return LP_FALLBACK;
    int64_t strides[6], expected = 1;
    for (int d = t.ndim - 1; d >= 0; d--) {  /* no strides: compact row-major */
        strides[d] = t.strides ? t.strides[d] : expected;
        expected *= t.shape[d];
    }
    int64_t step = 1;
    for (int k = inner - 1; k >= 0; k--) {  /* the element's own dimensions: its extents, adjacent */
        int d = op->ndim + k;
        if (t.shape[d] != op->dims[k] || (t.shape[d] != 1 && strides[d] != step)) return LP_FALLBACK;
        step *= op->dims[k];
    }
    WarpArray a;
    memset(&a, 0, sizeof a);
    a.data = (uint64_t)(uintptr_t)t.data + t.byte_offset;
    for (int d = 0; d < op->ndim; d++) {
        int64_t n = t.shape[d], s = strides[d];
        if (n > INT32_MAX || s > INT32_MAX / op->size || s < INT32_MIN / op->size) return LP_FALLBACK;
        a.shape[d] = (int32_t)n;
        a.strides[d] = (int32_t)(s * op->size);
    }
    a.ndim = (uint16_t)op->ndim;
    memcpy(L->buffer + op->slots[0].offset, &a, sizeof a);
    return LP_OK;
}
