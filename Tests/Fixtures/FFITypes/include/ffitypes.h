#ifndef FFITYPES_H
#define FFITYPES_H
#include <stdbool.h>
#include <stdint.h>

int8_t ffitypes_i8(int8_t v);
int16_t ffitypes_i16(int16_t v);
int32_t ffitypes_i32(int32_t v);
int64_t ffitypes_i64(int64_t v);
uint8_t ffitypes_u8(uint8_t v);
uint16_t ffitypes_u16(uint16_t v);
uint32_t ffitypes_u32(uint32_t v);
uint64_t ffitypes_u64(uint64_t v);
float ffitypes_float(float v);
double ffitypes_double(double v);
bool ffitypes_not(bool v);
double ffitypes_mix(int8_t a, uint16_t b, float c, double d, bool e, int64_t f);
void ffitypes_touch(void);
int32_t ffitypes_calls(void);
uint64_t ffitypes_strlen(const char *text);
const char *ffitypes_static(bool null);
uint64_t ffitypes_sum(const uint8_t *bytes, uint64_t length);
char *ffitypes_copy(const char *text);
void ffitypes_release(char *text);
int32_t ffitypes_live(void);
char *ffitypes_big(uint32_t size);

#endif
