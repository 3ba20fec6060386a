/* stitch/version_info.h: which libstitch this is. The macros are the
 * headers' version; stitch_version() the library's, which a program
 * linked against a shared libstitch may find newer. */
#ifndef STITCH_VERSION_INFO_H
#define STITCH_VERSION_INFO_H

#include "stitch/export.h"

#ifdef __cplusplus
extern "C" {
#endif
STITCH_API_BEGIN

#define STITCH_VERSION_MAJOR 0
#define STITCH_VERSION_MINOR 2
#define STITCH_VERSION_PATCH 0
#define STITCH_VERSION_STRING "0.2.0"
/* The swarm's wire protocol (proto/wire.md): peers of other protocols
 * refuse each other at HELLO. */
#define STITCH_WIRE_PROTOCOL 3

/* "0.2.0 (wire protocol 3)": static, never NULL. */
const char *stitch_version(void);

STITCH_API_END
#ifdef __cplusplus
}
#endif
#endif
