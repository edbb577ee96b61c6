/*
 * mathdemo: a small C library that knows nothing of Atrium. manifests/mathdemo.json exposes
 * three of its functions as the app service atrium.math, by declaring their signatures.
 */
#include "mathdemo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int64_t mathdemo_add(int64_t a, int64_t b) { return a + b; }

/* Adler-32 of `length` bytes. */
uint64_t mathdemo_checksum(const uint8_t *data, uint32_t length) {
    uint32_t a = 1, b = 0;
    for (uint32_t i = 0; i < length; i++) {
        a = (a + data[i]) % 65521;
        b = (b + a) % 65521;
    }
    return ((uint64_t)b << 16) | a;
}

/* "Hello, NAME!" in memory from malloc: the caller frees it. */
char *mathdemo_greet(const char *name) {
    size_t length = strlen(name) + sizeof("Hello, !");
    char *text = malloc(length);
    if (text != NULL) snprintf(text, length, "Hello, %s!", name);
    return text;
}
