/* view.c: placeholder until the view builders land. */
#include "stitch/view.h"
#include "common/diag.h"
int stitch_view_build(const stitch_st *masters, const stitch_st *prev,
                      const stitch_view_opts *opts, const char *out_path,
                      stitch_view_stats *stats, stitch_diag *d) {
  return stitch_diag_set(d, STITCH_EINVAL, "views are not built yet");
}
