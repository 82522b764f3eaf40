/*
 * ferry/ferry.h - umbrella header: everything a ferry program uses.
 */
#ifndef FERRY_FERRY_H
#define FERRY_FERRY_H

#include <ferry/verbs.h>
#include <ferry/cm.h>
#include <ferry/socket.h>

#endif /* FERRY_FERRY_H */
