/*
 * preload.h - the LD_PRELOAD shim: what its files share.
 */
#ifndef FERRY_PRELOAD_H
#define FERRY_PRELOAD_H

#define FP_EXPORT __attribute__((visibility("default")))

#endif /* FERRY_PRELOAD_H */
