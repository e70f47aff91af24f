/* torch tensors read from torch's fields (torch_fields.c), else through the DLPack C exchange API:
 * the tensor's device, dtype and memory, as every tensor-taking operation needs them. Its own file,
 * below values.c (plain arguments), tile.c (cuTile arrays), dispatch.c and replay.c, which all read
 * tensors: none of those calls another to read one, so the C sources have no cycle.
 *
 * Like values.c, nothing here raises: a tensor it does not take is LP_FALLBACK, no exception set.
 */
#include "claunch.h"
#include "common_values.h"

const DLPackExchangeAPI *lp_exchange_api(PyObject *tensor_type) {
    PyObject *capsule = PyObject_GetAttrString(tensor_type, "__dlpack_c_exchange_api__");
    if (capsule == NULL) {
        PyErr_Clear();
        return NULL;
    }
    const DLPackExchangeAPI *api = PyCapsule_GetPointer(capsule, "dlpack_exchange_api");
    Py_DECREF(capsule);  /* the table is static in torch; the capsule only names it */
    if (api == NULL) {
        PyErr_Clear();
        return NULL;
    }
    if (api->header.version.major != 1 || api->dltensor_from_py_object_no_sync == NULL) return NULL;
    return api;
}

int lp_read_tensor(const DLPackExchangeAPI *api, PyObject *tensor_types, PyObject *obj, DLTensor *out) {
    if (api == NULL || !lp_known_tensor_type(tensor_types, obj)) return LP_FALLBACK;
    if (lp_torch_tensor(obj, out) == LP_OK) return LP_OK;
    if (api->dltensor_from_py_object_no_sync(obj, out) != 0) {
        PyErr_Clear();
        return LP_FALLBACK;
    }
    return LP_OK;
}

int lp_read_pointer(const DLPackExchangeAPI *api, PyObject *tensor_types, PyObject *obj, uint64_t *address,
                    uint32_t *dtype, int *device) {
    DLTensor t;
    if (api == NULL || !lp_known_tensor_type(tensor_types, obj)) return LP_FALLBACK;
    if (lp_torch_pointer(obj, &t) != LP_OK && api->dltensor_from_py_object_no_sync(obj, &t) != 0) {
        PyErr_Clear();
        return LP_FALLBACK;
    }
    if (t.device.device_type == kDLCPU) *device = -1;
    else if (t.device.device_type == kDLCUDA) *device = t.device.device_id;
    else return LP_FALLBACK;
    *address = (uint64_t)(uintptr_t)t.data + t.byte_offset;
    *dtype = lp_dtype_word(&t);
    return LP_OK;
}

/* Whether a tensor lives where the launch runs: on the launch device, or on the CPU when the
 * device is -1 (torch's get_device() of a CPU tensor: what CPU tests launch on). */
int lp_on_device(const DLTensor *t, int device) {
    if (device < 0) return t->device.device_type == kDLCPU;
    return t->device.device_type == kDLCUDA && t->device.device_id == device;
}
