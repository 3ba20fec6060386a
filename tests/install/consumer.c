/* A program built against an installed libstitch (tests/install_tree.sh):
 * it uses stitch.h alone, prints the library's version, writes a fresh key
 * pair under DIR and reads it back, and digests one tensor twice. */
#include <stitch.h>

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: consumer DIR\n");
    return 2;
  }
  printf("stitch %s\n", stitch_version());

  stitch_pubkey pk, pk2;
  stitch_seckey sk, sk2;
  stitch_diag d = {{0}};
  char prefix[4096];
  snprintf(prefix, sizeof prefix, "%s/consumer", argv[1]);
  int rc = stitch_keygen(&pk, &sk);
  if (rc == 0) rc = stitch_key_write(prefix, &pk, &sk, &d);
  strcat(prefix, ".key");
  if (rc == 0) rc = stitch_seckey_read(prefix, &sk2, &pk2, &d);
  if (rc != 0) {
    fprintf(stderr, "consumer: key round trip: %s: %s\n", stitch_errname(rc),
            d.msg);
    return 1;
  }
  if (memcmp(&pk, &pk2, sizeof pk) != 0 || memcmp(&sk, &sk2, sizeof sk) != 0) {
    fprintf(stderr, "consumer: the key read back differs\n");
    return 1;
  }

  float v[4] = {1.0f, -2.0f, 0.5f, 3.25f};
  uint64_t shape[1] = {4};
  stitch_digest a, b;
  char hex[65];
  if (stitch_tensor_digest(STITCH_DT_F32, 1, shape, (const uint8_t *)v,
                           sizeof v, &a) != 0 ||
      stitch_tensor_digest(STITCH_DT_F32, 1, shape, (const uint8_t *)v,
                           sizeof v, &b) != 0 ||
      memcmp(&a, &b, sizeof a) != 0) {
    fprintf(stderr, "consumer: tensor digest failed or differs\n");
    return 1;
  }
  stitch_digest_hex(&a, hex);
  printf("key round trip ok, digest %s\n", hex);
  return 0;
}
