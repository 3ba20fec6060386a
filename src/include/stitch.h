/* stitch.h: the public API of libstitch. Programs include only this. */
#ifndef STITCH_H
#define STITCH_H

#include "stitch/error.h"
#include "stitch/version_info.h"
#include "stitch/safetensors.h"
#include "stitch/digest.h"
#include "stitch/view.h"
#include "stitch/delta.h"
#include "stitch/version.h"
#include "stitch/store.h"
#include "stitch/engine.h"
#include "stitch/admit.h"
#include "stitch/swarm.h"

#endif
