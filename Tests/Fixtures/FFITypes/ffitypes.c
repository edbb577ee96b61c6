/* Functions of every declarable type, for the declared-function tests. Knows nothing of Atrium. */
#include "ffitypes.h"

#include <stdlib.h>
#include <string.h>

int8_t ffitypes_i8(int8_t v) { return v; }
int16_t ffitypes_i16(int16_t v) { return v; }
int32_t ffitypes_i32(int32_t v) { return v; }
int64_t ffitypes_i64(int64_t v) { return v; }
uint8_t ffitypes_u8(uint8_t v) { return v; }
uint16_t ffitypes_u16(uint16_t v) { return v; }
uint32_t ffitypes_u32(uint32_t v) { return v; }
uint64_t ffitypes_u64(uint64_t v) { return v; }
float ffitypes_float(float v) { return v; }
double ffitypes_double(double v) { return v; }
bool ffitypes_not(bool v) { return !v; }

/* Mixed arguments, to check they arrive in order. */
double ffitypes_mix(int8_t a, uint16_t b, float c, double d, bool e, int64_t f) {
    return a + b + c + d + (e ? 1000 : 0) + f;
}

static int calls;
void ffitypes_touch(void) { calls++; }
int32_t ffitypes_calls(void) { return calls; }

uint64_t ffitypes_strlen(const char *text) { return strlen(text); }

/* A string the library keeps (never freed by the caller). */
const char *ffitypes_static(bool null) { return null ? NULL : "kept by the library: ünï"; }

/* Bytes summed, with their length passed separately. */
uint64_t ffitypes_sum(const uint8_t *bytes, uint64_t length) {
    uint64_t sum = 0;
    for (uint64_t i = 0; i < length; i++) sum += bytes[i];
    return sum;
}

/* Allocated strings, freed by ffitypes_release; ffitypes_live counts those not yet freed. */
static int live;
char *ffitypes_copy(const char *text) {
    char *copy = malloc(strlen(text) + 1);
    if (copy != NULL) {
        strcpy(copy, text);
        live++;
    }
    return copy;
}
void ffitypes_release(char *text) {
    if (text != NULL) live--;
    free(text);
}
int32_t ffitypes_live(void) { return live; }

/* A big allocated string, freed with the C library's free (for the memory test). */
char *ffitypes_big(uint32_t size) {
    char *text = malloc(size + 1);
    if (text != NULL) {
        memset(text, 'x', size);
        text[size] = 0;
    }
    return text;
}
