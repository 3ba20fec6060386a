/* test_keys.c: the swarm key files (src/version/keys.c; proto/manifest.md,
 * "Keys"), in a private directory under /tmp that is removed at the end. */
#define _DEFAULT_SOURCE /* mkdtemp */
#include "test.h"

#include "stitch.h"

#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64];

static void path_of(char *out, const char *name) {
  snprintf(out, 128, "%s/%s", dir, name);
}

static void put_file(const char *name, const char *text) {
  char p[128];
  path_of(p, name);
  FILE *f = fopen(p, "w");
  ASSERT(f != NULL);
  fputs(text, f);
  fclose(f);
}

static void slurp(const char *name, char *out, size_t cap) {
  char p[128];
  path_of(p, name);
  FILE *f = fopen(p, "r");
  ASSERT(f != NULL);
  size_t n = fread(out, 1, cap - 1, f);
  out[n] = 0;
  fclose(f);
}

static void test_key_files(void) {
  snprintf(dir, sizeof(dir), "/tmp/stitch-test-manifest-XXXXXX");
  ASSERT(mkdtemp(dir) != NULL);
  stitch_pubkey pk, pk2;
  stitch_seckey sk, sk2;
  stitch_diag d = {{0}};
  ASSERT_OK(stitch_keygen(&pk, &sk), d);
  char prefix[128], kp[128], pp[128];
  path_of(prefix, "swarm");
  path_of(kp, "swarm.key");
  path_of(pp, "swarm.pub");
  ASSERT_OK(stitch_key_write(prefix, &pk, &sk, &d), d);

  struct stat st;
  ASSERT_EQ(stat(kp, &st), 0);
  ASSERT_EQ(st.st_mode & 0777, 0600);
  ASSERT_EQ(stat(pp, &st), 0);
  ASSERT_EQ(st.st_mode & 0777, 0644);
  char text[256], hex[65];
  slurp("swarm.pub", text, sizeof(text));
  stitch_pubkey_hex(&pk, hex);
  ASSERT_UEQ(strlen(text), 22 + 64 + 1);
  ASSERT(strncmp(text, "stitch-ed25519-public ", 22) == 0);
  ASSERT(strncmp(text + 22, hex, 64) == 0 && text[86] == '\n');
  slurp("swarm.key", text, sizeof(text));
  ASSERT_UEQ(strlen(text), 22 + 128 + 1);
  ASSERT(strncmp(text, "stitch-ed25519-secret ", 22) == 0);

  ASSERT_OK(stitch_seckey_read(kp, &sk2, &pk2, &d), d);
  ASSERT_MEM_EQ(sk2.b, sk.b, 64);
  ASSERT_MEM_EQ(pk2.b, pk.b, 32);
  ASSERT_OK(stitch_seckey_read(kp, &sk2, NULL, &d), d);
  memset(&pk2, 0, sizeof(pk2));
  ASSERT_OK(stitch_pubkey_read(pp, &pk2, &d), d);
  ASSERT_MEM_EQ(pk2.b, pk.b, 32);

  /* Never overwritten, either file, and nothing is left behind. */
  stitch_pubkey pk3;
  stitch_seckey sk3;
  ASSERT_OK(stitch_keygen(&pk3, &sk3), d);
  ASSERT_ERR(stitch_key_write(prefix, &pk3, &sk3, &d), STITCH_EEXISTS, d,
             "already exists");
  ASSERT_OK(stitch_seckey_read(kp, &sk2, NULL, &d), d);
  ASSERT_MEM_EQ(sk2.b, sk.b, 64);
  ASSERT_EQ(unlink(kp), 0);
  ASSERT_ERR(stitch_key_write(prefix, &pk3, &sk3, &d), STITCH_EEXISTS, d,
             "swarm.pub: already exists");
  ASSERT_EQ(stat(kp, &st), -1); /* the .key was not written either */
  ASSERT_ERR(stitch_key_write(prefix, &pk, &sk3, &d), STITCH_EINVAL, d,
             "public half");

  /* Bad files, each with its own line. */
  stitch_pubkey_hex(&pk, hex);
  char line[300];
  snprintf(line, sizeof(line), "stitch-ed25519-public %.63sg\n", hex);
  put_file("badhex.pub", line);
  snprintf(line, sizeof(line), "stitch-ed25519-public %.62s\n", hex);
  put_file("short.pub", line);
  snprintf(line, sizeof(line), "stitch-ed25519-public %s\nmore\n", hex);
  put_file("trailing.pub", line);
  snprintf(line, sizeof(line), "stitch-ed25519-public %s", hex);
  put_file("nonewline.pub", line);
  snprintf(line, sizeof(line), "ssh-ed25519 %s\n", hex);
  put_file("header.pub", line);
  put_file("empty.pub", "");
  char skhex[129];
  sodium_bin2hex(skhex, sizeof(skhex), sk.b, 64);
  skhex[127] = skhex[127] == '0' ? '1' : '0'; /* last digit of the pk half */
  snprintf(line, sizeof(line), "stitch-ed25519-secret %s\n", skhex);
  put_file("mismatch.key", line);
  static const struct {
    const char *file;
    int secret, rc;
    const char *msg;
  } bad[] = {
      {"badhex.pub", 0, STITCH_EFORMAT, "bad hex digit"},
      {"short.pub", 0, STITCH_EFORMAT, "expected 64 hex digits"},
      {"trailing.pub", 0, STITCH_EFORMAT, "unexpected bytes"},
      {"header.pub", 0, STITCH_EFORMAT, "not a stitch key file"},
      {"empty.pub", 0, STITCH_EFORMAT, "not a stitch key file"},
      {"swarm.pub", 1, STITCH_EFORMAT, "holds a public key, not a secret"},
      {"mismatch.key", 1, STITCH_EFORMAT, "does not match the secret seed"},
      {"missing.key", 1, STITCH_ENOTFOUND, "missing.key"},
      {"missing.pub", 0, STITCH_ENOTFOUND, "missing.pub"},
      {"", 0, STITCH_EIO, "not a regular file"}, /* the directory */
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    char p[128];
    path_of(p, bad[i].file);
    memset(&d, 0, sizeof(d));
    int rc = bad[i].secret ? stitch_seckey_read(p, &sk2, NULL, &d)
                           : stitch_pubkey_read(p, &pk2, &d);
    if (rc != bad[i].rc || strstr(d.msg, bad[i].msg) == NULL)
      FAIL_("%s: rc %d (%s), expected %d and \"%s\"", bad[i].file, rc, d.msg,
            bad[i].rc, bad[i].msg);
    if (bad[i].secret) /* nothing of a refused secret is left behind */
      for (int k = 0; k < 64; k++)
        ASSERT_EQ(sk2.b[k], 0);
  }
  char p[128];
  path_of(p, "nonewline.pub");
  ASSERT_OK(stitch_pubkey_read(p, &pk2, &d), d);
  ASSERT_MEM_EQ(pk2.b, pk.b, 32);
  char upper[65];
  for (int i = 0; i < 65; i++)
    upper[i] = (char)(hex[i] >= 'a' ? hex[i] - 'a' + 'A' : hex[i]);
  snprintf(line, sizeof(line), "stitch-ed25519-public %s\n", upper);
  put_file("upper.pub", line);
  path_of(p, "upper.pub");
  memset(&pk2, 0, sizeof(pk2));
  ASSERT_OK(stitch_pubkey_read(p, &pk2, &d), d);
  ASSERT_MEM_EQ(pk2.b, pk.b, 32);

  /* Clean up: only the files this test made. */
  static const char *const files[] = {
      "swarm.pub",    "badhex.pub",   "short.pub",
      "trailing.pub", "header.pub",   "nonewline.pub",
      "empty.pub",    "mismatch.key", "upper.pub"};
  for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
    path_of(p, files[i]);
    ASSERT_EQ(unlink(p), 0);
  }
  ASSERT_EQ(rmdir(dir), 0); /* fails if a temporary was left behind */
}

int main(void) {
  ASSERT(sodium_init() >= 0);
  test_key_files();
  puts("test_keys: ok");
  return 0;
}
