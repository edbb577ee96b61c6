#ifndef MATHDEMO_H
#define MATHDEMO_H
#include <stdint.h>

int64_t mathdemo_add(int64_t a, int64_t b);
uint64_t mathdemo_checksum(const uint8_t *data, uint32_t length);
char *mathdemo_greet(const char *name);

#endif
