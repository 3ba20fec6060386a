/* regression_driver.c: replays files through a fuzz target without
 * libFuzzer (after zstd's tests/fuzz/regression_driver.c), so ctest runs
 * every committed corpus input on every build, sanitized or not.
 *
 *   fuzz_X_replay PATH...   each PATH a file or a directory of files
 *
 * Files in a directory are replayed in name order (dot files skipped). A
 * crash or abort() in the target fails the test by itself; the driver also
 * fails when it found no input at all, so a mistyped corpus path cannot
 * pass silently. The name of each file is printed before it runs, so the
 * last line before a crash names the input. */
#define _DEFAULT_SOURCE
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    fprintf(stderr, "regression_driver: %s: %s\n", path, strerror(errno));
    return -1;
  }
  size_t cap = 1 << 16, len = 0;
  uint8_t *buf = malloc(cap);
  while (buf != NULL) {
    size_t n = fread(buf + len, 1, cap - len, f);
    len += n;
    if (len < cap)
      break;
    uint8_t *nb = realloc(buf, cap * 2);
    if (nb == NULL) {
      free(buf);
      buf = NULL;
      break;
    }
    buf = nb;
    cap *= 2;
  }
  int err = buf == NULL || ferror(f);
  fclose(f);
  if (err) {
    fprintf(stderr, "regression_driver: %s: cannot read\n", path);
    free(buf);
    return -1;
  }
  /* An exactly sized copy, so ASan catches a read one past the input. */
  uint8_t *exact = malloc(len ? len : 1);
  if (exact == NULL) {
    free(buf);
    return -1;
  }
  memcpy(exact, buf, len);
  free(buf);
  fprintf(stderr, "  %s (%zu bytes)\n", path, len);
  LLVMFuzzerTestOneInput(exact, len);
  free(exact);
  return 0;
}

static int cmp_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Returns the number of files run, or -1 on error. */
static long run_path(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) {
    fprintf(stderr, "regression_driver: %s: %s\n", path, strerror(errno));
    return -1;
  }
  if (!S_ISDIR(st.st_mode))
    return run_file(path) == 0 ? 1 : -1;
  DIR *dir = opendir(path);
  if (dir == NULL) {
    fprintf(stderr, "regression_driver: %s: %s\n", path, strerror(errno));
    return -1;
  }
  char **names = NULL;
  size_t n = 0, cap = 0;
  struct dirent *de;
  while ((de = readdir(dir)) != NULL) {
    if (de->d_name[0] == '.')
      continue;
    if (n == cap) {
      cap = cap ? 2 * cap : 64;
      char **nn = realloc(names, cap * sizeof(*names));
      if (nn == NULL)
        break;
      names = nn;
    }
    names[n] = strdup(de->d_name);
    if (names[n] != NULL)
      n++;
  }
  closedir(dir);
  qsort(names, n, sizeof(*names), cmp_name);
  long ran = 0;
  for (size_t i = 0; i < n; i++) {
    size_t pl = strlen(path) + strlen(names[i]) + 2;
    char *full = malloc(pl);
    if (full != NULL) {
      snprintf(full, pl, "%s/%s", path, names[i]);
      long r = run_path(full);
      ran = r < 0 || ran < 0 ? -1 : ran + r;
      free(full);
    }
    free(names[i]);
  }
  free(names);
  return ran;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s FILE_OR_DIR...\n", argv[0]);
    return 2;
  }
  long total = 0;
  for (int i = 1; i < argc; i++) {
    long r = run_path(argv[i]);
    if (r < 0)
      return 1;
    total += r;
  }
  if (total == 0) {
    fprintf(stderr, "regression_driver: no inputs found\n");
    return 1;
  }
  fprintf(stderr, "regression_driver: %ld inputs replayed\n", total);
  return 0;
}
