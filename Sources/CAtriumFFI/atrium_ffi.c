#include "atrium_ffi.h"

#include <stdlib.h>

ffi_type *atrium_ffi_type(int code) {
    switch (code) {
    case ATRIUM_FFI_VOID: return &ffi_type_void;
    case ATRIUM_FFI_SINT8: return &ffi_type_sint8;
    case ATRIUM_FFI_SINT16: return &ffi_type_sint16;
    case ATRIUM_FFI_SINT32: return &ffi_type_sint32;
    case ATRIUM_FFI_SINT64: return &ffi_type_sint64;
    case ATRIUM_FFI_UINT8: return &ffi_type_uint8;
    case ATRIUM_FFI_UINT16: return &ffi_type_uint16;
    case ATRIUM_FFI_UINT32: return &ffi_type_uint32;
    case ATRIUM_FFI_UINT64: return &ffi_type_uint64;
    case ATRIUM_FFI_FLOAT: return &ffi_type_float;
    case ATRIUM_FFI_DOUBLE: return &ffi_type_double;
    case ATRIUM_FFI_POINTER: return &ffi_type_pointer;
    default: return NULL;
    }
}

/* The cif and its argument type array in one allocation. */
typedef struct {
    ffi_cif cif;
    ffi_type *types[];
} prepared;

ffi_cif *atrium_ffi_cif_new(int return_code, const int *argument_codes, unsigned count) {
    prepared *p = malloc(sizeof(prepared) + sizeof(ffi_type *) * (count ? count : 1));
    if (p == NULL) return NULL;
    for (unsigned i = 0; i < count; i++) {
        p->types[i] = atrium_ffi_type(argument_codes[i]);
        if (p->types[i] == NULL) { free(p); return NULL; }
    }
    ffi_type *result = atrium_ffi_type(return_code);
    if (result == NULL || ffi_prep_cif(&p->cif, FFI_DEFAULT_ABI, count, result, p->types) != FFI_OK) {
        free(p);
        return NULL;
    }
    return &p->cif;
}

void atrium_ffi_cif_free(ffi_cif *cif) { free(cif); /* the cif is the first member */ }

void atrium_ffi_call(ffi_cif *cif, void (*function)(void), void *result, void **arguments) {
    ffi_call(cif, function, result, arguments);
}
