#ifndef ATRIUM_SYSTEM_H
#define ATRIUM_SYSTEM_H

/* System calls the host needs that Swift's Glibc module does not offer. */

/* Gives freed heap memory back to the system (glibc's malloc_trim(0)); returns 1 when some
 * was released, 0 otherwise (and always 0 where there is no malloc_trim). */
int atrium_release_free_memory(void);

#endif
