/* The argument kinds most launches are made of, packed inline in lp_launch's loop (launcher.c)
 * with values.c's own checks (the two helpers below, which values.c calls too): a plain torch
 * tensor into a pointer slot, read from torch's fields, a one-digit int into a signed integer
 * slot, and Triton's empty scratch pointers. What they do not take (None, a raw address, a bool,
 * a tensor the fields do not read, a wrong dtype, device or alignment, a broken promise) goes to
 * lp_run_op, which reads it again and decides: they change no result, only what an argument costs
 * (a tensor went through five nested calls, ~170 instructions, before its read).
 */
#ifndef LP_COMMON_VALUES_H
#define LP_COMMON_VALUES_H

#include "claunch.h"

#include <string.h>

/* torch_fields.c: a pointer argument's address, dtype word and device (-1: the CPU) from torch's
 * fields, as lp_read_pointer gives them where the fields take the tensor; LP_FALLBACK otherwise (the
 * caller then asks lp_read_pointer, which tries the exchange API too). */
int lp_torch_address(PyObject *obj, uint64_t *address, uint32_t *dtype, int *device);
/* Only torch.Tensor and torch.nn.Parameter themselves (``tensor_types``): other subclasses (fake,
 * functional, distributed tensors) may have no storage of their own; the Python executor decides
 * for them. */
static inline int lp_known_tensor_type(PyObject *tensor_types, PyObject *obj) {
    PyObject *type = (PyObject *)Py_TYPE(obj);
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(tensor_types); i++)
        if (PyTuple_GET_ITEM(tensor_types, i) == type) return 1;
    return 0;
}

/* An integer slot's ``size`` low bytes of ``v`` (a little-endian host: x86-64, aarch64); each width
 * its own store (a memcpy of a size known only at run time is a library call). */
static inline void lp_store_u64(char *at, uint32_t size, uint64_t v) {
    uint8_t v8 = (uint8_t)v;
    uint16_t v16 = (uint16_t)v;
    uint32_t v32 = (uint32_t)v;
    switch (size) {
    case 8: memcpy(at, &v, 8); break;
    case 4: memcpy(at, &v32, 4); break;
    case 2: memcpy(at, &v16, 2); break;
    case 1: memcpy(at, &v8, 1); break;
    default: memcpy(at, &v, size); break;
    }
}

/* What a tensor in a pointer slot must be, read as lp_read_pointer or lp_torch_address gives it: on
 * the launch's device (-1: the CPU, where CPU tests launch) and of the slot's dtype, where it has one.
 * values.c's pack_pointer and the inline path below both ask this, so the two cannot drift apart. */
static inline int lp_tensor_fits(const Launch *L, uint32_t word, int device, uint32_t dtype) {
    return device == (L->device < 0 ? -1 : L->device) && (!dtype || word == dtype);
}

/* What a signed integer slot of ``size`` bytes takes: a value within its width, a multiple of
 * ``multiple_of`` where the kernel was promised one (pack_int and the inline path below). */
static inline int lp_signed_fits(long long v, uint32_t size, int64_t multiple_of) {
    uint32_t bits = 8 * size;
    if (bits < 64 && (v < -(1LL << (bits - 1)) || v >= (1LL << (bits - 1)))) return 0;
    return !multiple_of || lp_multiple_s(v, multiple_of);
}

/* LP_OK with the slot written, or LP_FALLBACK with nothing written (no exception set). Also a
 * scratch pointer of no size (Triton's unused global and profile scratch): NULL, as run_scratch. */
static inline int lp_run_common_value(Launch *L, const Op *op, PyObject *const *args, Py_ssize_t nargs) {
    if (op->kind == OP_SCRATCH && op->size == 0) {
        uint64_t zero = 0;
        memcpy(L->buffer + op->slots[0].offset, &zero, 8);
        return LP_OK;
    }
    if (op->kind != OP_VALUE || op->depth != 0 || op->position >= nargs) return LP_FALLBACK;
    PyObject *v = args[op->position];
    const Slot *slot = &op->slots[0];
    char *at = L->buffer + slot->offset;
    if (slot->kind == SK_POINTER) {  /* pack_pointer's tensor branch */
        uint64_t address;
        uint32_t word;
        int device;
        if (L->self->api == NULL || !lp_known_tensor_type(L->self->tensor_types, v) ||
            lp_torch_address(v, &address, &word, &device) != LP_OK || !lp_tensor_fits(L, word, device, op->dtype) ||
            (op->align && !lp_multiple_u(address, (uint64_t)op->align)))
            return LP_FALLBACK;
        memcpy(at, &address, 8);
        return LP_OK;
    }
    if (slot->kind == SK_INT && PyLong_CheckExact(v)) {  /* pack_int's signed branch, one digit */
        long long x;
        if (!lp_compact_int(v, &x) || !lp_signed_fits(x, slot->size, op->multiple_of)) return LP_FALLBACK;
        lp_store_u64(at, slot->size, (uint64_t)x);
        return LP_OK;
    }
    return LP_FALLBACK;
}

#endif
