/* A thin shim over libffi for AtriumHost's declared functions: the ffi_type globals as
 * functions (Swift cannot take the address of a C global safely), and the two calls used. */
#ifndef ATRIUM_FFI_H
#define ATRIUM_FFI_H

#if defined(__has_include) && !__has_include(<ffi.h>)
#error "libffi's headers are missing (Debian package libffi-dev); Atrium also needs libavahi-client-dev. Install both with `sudo apt-get install libffi-dev libavahi-client-dev` (or run Scripts/ensure-deps.sh), then build again"
#endif
#include <ffi.h>
#include <stddef.h>
#include <stdint.h>

/* Type codes, in the order AtriumHost's FFIType lists them. */
enum atrium_ffi_code {
    ATRIUM_FFI_VOID = 0,
    ATRIUM_FFI_SINT8, ATRIUM_FFI_SINT16, ATRIUM_FFI_SINT32, ATRIUM_FFI_SINT64,
    ATRIUM_FFI_UINT8, ATRIUM_FFI_UINT16, ATRIUM_FFI_UINT32, ATRIUM_FFI_UINT64,
    ATRIUM_FFI_FLOAT, ATRIUM_FFI_DOUBLE, ATRIUM_FFI_POINTER
};

/* The libffi type for a code. */
ffi_type *atrium_ffi_type(int code);

/* A prepared call interface, allocated with its argument type array; free with
 * atrium_ffi_cif_free. Returns NULL when libffi refuses the signature. */
ffi_cif *atrium_ffi_cif_new(int return_code, const int *argument_codes, unsigned count);
void atrium_ffi_cif_free(ffi_cif *cif);

/* Calls `function` through `cif`: `result` needs at least 16 bytes, `arguments` points at one
 * pointer per argument, each to that argument's value. */
void atrium_ffi_call(ffi_cif *cif, void (*function)(void), void *result, void **arguments);

#endif
