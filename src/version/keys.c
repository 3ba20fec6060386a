/* keys.c: the swarm's Ed25519 key pair and its files (proto/manifest.md,
 * "Keys").
 *
 * Each key is one line of text: a header word, a space, lowercase hex, a
 * newline. The secret file is created with mode 0600 and neither file is
 * ever overwritten: a second `stitch keygen` into the same prefix must not
 * silently replace the key that names a running swarm. Secrets are wiped
 * from every buffer they pass through. */
#define _POSIX_C_SOURCE 200809L
#include "stitch/version.h"

#include "common/diag.h"
#include "common/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PUB_WORD "stitch-ed25519-public"
#define SEC_WORD "stitch-ed25519-secret"
/* Longest valid file: the secret's header, space, 128 hex digits, "\n". */
#define KEY_FILE_MAX (sizeof(SEC_WORD) + 2 * STITCH_SECKEY_BYTES + 1)

/* sodium_init is idempotent and thread-safe; it fails only when the OS
 * has no randomness to give. */
static int sodium_ready(stitch_diag *d) {
  RETURN_IF(sodium_init() < 0, d, STITCH_EIO, "libsodium failed to start");
  return 0;
}

/* 0 when the public half stored in sk is the one its seed gives. */
static int seckey_consistent(const stitch_seckey *sk) {
  uint8_t seed[crypto_sign_SEEDBYTES], pk[crypto_sign_PUBLICKEYBYTES];
  uint8_t sk2[crypto_sign_SECRETKEYBYTES];
  crypto_sign_ed25519_sk_to_seed(seed, sk->b);
  crypto_sign_seed_keypair(pk, sk2, seed);
  int bad = memcmp(pk, sk->b + crypto_sign_SEEDBYTES, sizeof(pk)) != 0;
  sodium_memzero(seed, sizeof(seed));
  sodium_memzero(sk2, sizeof(sk2));
  return bad ? -1 : 0;
}

int stitch_keygen(stitch_pubkey *pk, stitch_seckey *sk) {
  if (pk == NULL || sk == NULL)
    return STITCH_EINVAL;
  CHECK_RC(sodium_ready(NULL));
  return crypto_sign_keypair(pk->b, sk->b) == 0 ? 0 : STITCH_EIO;
}

void stitch_pubkey_hex(const stitch_pubkey *pk, char out[65]) {
  sodium_bin2hex(out, 65, pk->b, sizeof(pk->b));
}

/* ---- writing ------------------------------------------------------------ */

/* Creates PATH holding BUF with MODE, whole or not at all, and fails with
 * STITCH_EEXISTS rather than replace an existing file. stitch_tmpfile
 * writes a temporary in the same directory; link(2), unlike the rename
 * of stitch_tmpfile_commit, refuses an existing target atomically. */
static int write_new(const char *path, const char *buf, size_t len, mode_t mode,
                     stitch_diag *d) {
  stitch_tmpfile t;
  CHECK_RC(stitch_tmpfile_open(&t, path, d));
  int rc = 0;
  if (fchmod(t.fd, mode) != 0) /* before any byte of a secret is written */
    rc = stitch_diag_set(d, STITCH_EIO, "%s: chmod: %s", path, strerror(errno));
  if (rc == 0)
    rc = stitch_tmpfile_write(&t, buf, len, d);
  if (rc == 0 && fsync(t.fd) != 0)
    rc = stitch_diag_set(d, STITCH_EIO, "%s: fsync: %s", path, strerror(errno));
  if (rc == 0 && link(t.tmp_path, path) != 0)
    rc = errno == EEXIST
             ? stitch_diag_set(d, STITCH_EEXISTS,
                               "%s: already exists; not overwriting it", path)
             : stitch_diag_set(d, STITCH_EIO, "%s: cannot create: %s", path,
                               strerror(errno));
  stitch_tmpfile_abort(&t); /* closes and unlinks the temporary name */
  if (rc == 0 && stitch_fsync_dir_of(path) != 0)
    rc = stitch_diag_set(d, STITCH_EIO, "%s: fsync of directory: %s", path,
                         strerror(errno));
  return rc;
}

static int refuse_existing(const char *path, stitch_diag *d) {
  struct stat st;
  RETURN_IF(lstat(path, &st) == 0, d, STITCH_EEXISTS,
            "%s: already exists; not overwriting it", path);
  return 0;
}

int stitch_key_write(const char *prefix, const stitch_pubkey *pk,
                     const stitch_seckey *sk, stitch_diag *d) {
  RETURN_IF(prefix == NULL || pk == NULL || sk == NULL, d, STITCH_EINVAL,
            "key: NULL argument");
  CHECK_RC(sodium_ready(d));
  int pair = seckey_consistent(sk) == 0 &&
             memcmp(pk->b, sk->b + crypto_sign_SEEDBYTES, sizeof(pk->b)) == 0;
  RETURN_IF(!pair, d, STITCH_EINVAL,
            "key: the public key is not the secret key's public half");
  size_t n = strlen(prefix) + 5;
  char *kpath = malloc(n), *ppath = malloc(n);
  if (kpath == NULL || ppath == NULL) {
    free(kpath);
    free(ppath);
    return stitch_diag_set(d, STITCH_ENOMEM, "out of memory");
  }
  snprintf(kpath, n, "%s.key", prefix);
  snprintf(ppath, n, "%s.pub", prefix);

  /* Checked up front so that neither file is written when either exists;
   * write_new still refuses atomically if one appears meanwhile. */
  int rc = refuse_existing(kpath, d);
  if (rc == 0)
    rc = refuse_existing(ppath, d);
  char line[KEY_FILE_MAX];
  if (rc == 0) {
    memcpy(line, SEC_WORD " ", sizeof(SEC_WORD));
    sodium_bin2hex(line + sizeof(SEC_WORD), 2 * sizeof(sk->b) + 1, sk->b,
                   sizeof(sk->b));
    line[KEY_FILE_MAX - 1] = '\n';
    rc = write_new(kpath, line, KEY_FILE_MAX, 0600, d);
    sodium_memzero(line, sizeof(line));
  }
  if (rc == 0) {
    size_t pl = sizeof(PUB_WORD) + 2 * sizeof(pk->b) + 1;
    memcpy(line, PUB_WORD " ", sizeof(PUB_WORD));
    sodium_bin2hex(line + sizeof(PUB_WORD), 2 * sizeof(pk->b) + 1, pk->b,
                   sizeof(pk->b));
    line[pl - 1] = '\n';
    rc = write_new(ppath, line, pl, 0644, d);
    if (rc != 0) /* a half-written pair is worse than none */
      unlink(kpath);
  }
  free(kpath);
  free(ppath);
  return rc;
}

/* ---- reading ------------------------------------------------------------ */

/* Parses the text of a key file: "WORD <hex>" and an optional newline,
 * nothing else. OTHER is the other kind's header word, named in the
 * message when it is found instead. */
static int parse_key_line(const char *buf, size_t len, const char *path,
                          const char *word, const char *other, uint8_t *out,
                          size_t nbytes, stitch_diag *d) {
  size_t wl = strlen(word), ol = strlen(other), hex_len = 2 * nbytes;
  if (len <= wl || memcmp(buf, word, wl) != 0 || buf[wl] != ' ') {
    RETURN_IF(len > ol && memcmp(buf, other, ol) == 0, d, STITCH_EFORMAT,
              "%s: holds a %s key, not a %s key", path,
              strstr(other, "public") ? "public" : "secret",
              strstr(word, "public") ? "public" : "secret");
    return stitch_diag_set(d, STITCH_EFORMAT,
                           "%s: not a stitch key file (expected \"%s ...\")",
                           path, word);
  }
  /* The hex runs to the newline or to the end of the file. */
  const char *hex = buf + wl + 1;
  const char *nl = memchr(hex, '\n', len - wl - 1);
  size_t found = nl != NULL ? (size_t)(nl - hex) : len - wl - 1;
  RETURN_IF(found != hex_len, d, STITCH_EFORMAT,
            "%s: expected %zu hex digits after \"%s\", found %zu", path,
            hex_len, word, found);
  size_t bin_len = 0;
  const char *end = NULL;
  int rc = sodium_hex2bin(out, nbytes, hex, hex_len, NULL, &bin_len, &end);
  RETURN_IF(rc != 0 || bin_len != nbytes || end != hex + hex_len, d,
            STITCH_EFORMAT, "%s: bad hex digit in the key", path);
  RETURN_IF(wl + 1 + hex_len + (nl != NULL) != len, d, STITCH_EFORMAT,
            "%s: unexpected bytes after the key line", path);
  return 0;
}

/* Reads the key file PATH with header WORD into out[nbytes]. Wipes its
 * buffer, and OUT on failure. */
static int read_key_line(const char *path, const char *word, const char *other,
                         uint8_t *out, size_t nbytes, stitch_diag *d) {
  /* O_NONBLOCK: a FIFO must not hang us; only regular files are read. */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  RETURN_IF(fd < 0, d, errno == ENOENT ? STITCH_ENOTFOUND : STITCH_EIO,
            "%s: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return stitch_diag_set(d, STITCH_EIO, "%s: not a regular file", path);
  }
  char buf[KEY_FILE_MAX + 1]; /* one more, to see a file that is too long */
  size_t len = 0;
  int rc = 0;
  while (len < sizeof(buf)) {
    ssize_t r = read(fd, buf + len, sizeof(buf) - len);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0)
      rc =
          stitch_diag_set(d, STITCH_EIO, "%s: read: %s", path, strerror(errno));
    if (r <= 0)
      break;
    len += (size_t)r;
  }
  close(fd);
  if (rc == 0)
    rc = parse_key_line(buf, len, path, word, other, out, nbytes, d);
  sodium_memzero(buf, sizeof(buf));
  if (rc != 0)
    sodium_memzero(out, nbytes);
  return rc;
}

int stitch_seckey_read(const char *path, stitch_seckey *sk, stitch_pubkey *pk,
                       stitch_diag *d) {
  RETURN_IF(path == NULL || sk == NULL, d, STITCH_EINVAL, "key: NULL argument");
  CHECK_RC(sodium_ready(d));
  CHECK_RC(read_key_line(path, SEC_WORD, PUB_WORD, sk->b, sizeof(sk->b), d));
  if (seckey_consistent(sk) != 0) {
    sodium_memzero(sk->b, sizeof(sk->b));
    return stitch_diag_set(d, STITCH_EFORMAT,
                           "%s: the public half does not match the secret "
                           "seed",
                           path);
  }
  if (pk != NULL)
    memcpy(pk->b, sk->b + crypto_sign_SEEDBYTES, sizeof(pk->b));
  return 0;
}

int stitch_pubkey_read(const char *path, stitch_pubkey *pk, stitch_diag *d) {
  RETURN_IF(path == NULL || pk == NULL, d, STITCH_EINVAL, "key: NULL argument");
  return read_key_line(path, PUB_WORD, SEC_WORD, pk->b, sizeof(pk->b), d);
}
