# Shell-driven tests: CLI contracts and whole-trajectory round trips.
# Each gets the directory holding the built programs.
set(STITCH_BIN ${CMAKE_BINARY_DIR}/bin)

add_test(NAME cli_view
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/cli_view.sh $<TARGET_FILE:stitch-cli>)
if(TARGET stitch-synth)
  add_test(NAME roundtrip_synth
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/roundtrip_synth.sh ${STITCH_BIN})
endif()
if(TARGET stitch-synth)
  add_test(NAME synth COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/synth.sh ${CMAKE_BINARY_DIR})
endif()
# Real PyTorch training (tools/setup-python.sh installs torch); skips with
# exit 77 when torch cannot be imported.
add_test(NAME real_trajectory
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/real_trajectory.sh ${STITCH_BIN})
set_tests_properties(real_trajectory PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 900)
add_test(NAME cli_errors
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/cli_errors.sh $<TARGET_FILE_DIR:stitch-cli>)
set_tests_properties(cli_errors PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)
# The version layer through the CLI (issue 3), and kill -9 during applies.
if(TARGET stitch-synth)
  add_test(NAME versions
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/versions.sh ${STITCH_BIN})
  add_test(NAME crash
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/crash.sh ${STITCH_BIN} 40)
  set_tests_properties(versions crash PROPERTIES TIMEOUT 600)
endif()
# The swarm on loopback (issue 4): a seed and 6 stitchd nodes, 3 versions.
# Every node bit-exact, and the seed's egress within 1.5 copies of what the
# versions need.
if(TARGET stitchd AND TARGET stitch-synth)
  add_test(NAME swarm_demo_small
           COMMAND sh -c [=[
out="$(python3 "$0" --bin "$1" --nodes 6 --versions 3 --json --quiet --timeout 200)" || exit 1
printf '%s\n' "$out"
printf '%s\n' "$out" | python3 -c '
import json, sys
r = json.load(sys.stdin)
if r["all_bit_exact"] is not True:
    sys.exit("swarm_demo_small: not every node is bit-exact")
if r["seed_egress_bytes"] > 1.5 * r["version_bytes"]:
    sys.exit("swarm_demo_small: seed egress %d B > 1.5 x version_bytes %d B"
             % (r["seed_egress_bytes"], r["version_bytes"]))'
]=] ${CMAKE_SOURCE_DIR}/tools/swarm-demo ${STITCH_BIN})
  set_tests_properties(swarm_demo_small PROPERTIES TIMEOUT 300)
  # A full seed: with --max-peers 1 it takes 6 links, so the last 2 of 8
  # nodes, told of the seed alone, must reach the others through the
  # PEERS a full node sends before it closes. They must end bit-exact.
  add_test(NAME swarm_demo_full_seed
           COMMAND sh -c [=[
out="$(python3 "$0" --bin "$1" --nodes 8 --versions 2 --max-peers 1 --seed-only --json --quiet --timeout 120)" || exit 1
printf '%s
' "$out"
printf '%s
' "$out" | python3 -c '
import json, sys
r = json.load(sys.stdin)
if r["all_bit_exact"] is not True or r["bit_exact_nodes"] != 8:
    sys.exit("swarm_demo_full_seed: not every node is bit-exact")'
]=] ${CMAKE_SOURCE_DIR}/tools/swarm-demo ${STITCH_BIN})
  set_tests_properties(swarm_demo_full_seed PROPERTIES TIMEOUT 300)
endif()
# The Python binding (python/stitch) over libstitch.so: publisher, engine
# adapter, TRL interop, the vLLM and SGLang extensions (against stand-in
# workers; neither engine is needed). Skip with exit 77 when torch or
# safetensors cannot be imported; PYTHON overrides the interpreter.
# Not under the sanitizers: python cannot load an ASan-instrumented library
# without preloading the runtime.
if(TARGET stitch_shared AND NOT STITCH_SANITIZE)
  foreach(t binding trl engine engines_ext)
    add_test(NAME python_${t}
             COMMAND sh -c "exec \"\${PYTHON:-python3}\" \"$0\""
                     ${CMAKE_CURRENT_SOURCE_DIR}/python/test_${t}.py)
    set_tests_properties(python_${t} PROPERTIES
      SKIP_RETURN_CODE 77 TIMEOUT 300
      ENVIRONMENT "PYTHONPATH=${CMAKE_SOURCE_DIR}/python;STITCH_LIB=$<TARGET_FILE:stitch_shared>")
  endforeach()
endif()
# stitchd's HTTP sidecar (issue 6): a seed, a node with --http in front of a
# stand-in engine, curl and http.client as clients. Skips without them.
if(TARGET stitchd AND TARGET stitch-synth)
  add_test(NAME sidecar
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/sidecar.sh ${STITCH_BIN})
  set_tests_properties(sidecar PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)
  # Its two phases (issue 38): the prepare hook while the engine serves,
  # the commit in the gate; a failed prepare, a stale commit, auto retries.
  add_test(NAME sidecar_prepare
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/sidecar_prepare.sh
                   ${STITCH_BIN})
  set_tests_properties(sidecar_prepare PROPERTIES
    SKIP_RETURN_CODE 77 TIMEOUT 300)
  # A closed swarm of real processes: tickets, refusals, revocation.
  add_test(NAME admission
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/admission.sh ${STITCH_BIN})
  set_tests_properties(admission PROPERTIES TIMEOUT 300)
  # 1,000 hostile connections against one real node: its RSS cap.
  add_test(NAME hostile_conns
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/hostile_conns.sh ${STITCH_BIN})
  set_tests_properties(hostile_conns PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 120)
endif()
# Encrypted links (proto 2): tcpdump records loopback while a seed and 2
# nodes move 2 versions; no chunk of the store may be found in clear in
# it. Skips without tcpdump, or where capture on lo is not permitted.
if(TARGET stitchd AND TARGET stitch-synth)
  add_test(NAME capture
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/capture.sh ${STITCH_BIN})
  set_tests_properties(capture PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 120)
endif()
# Issue 6 end to end: a training loop (PyTorch, Publisher.hook) publishes,
# a seed and a node spread the versions, a stand-in engine patches its torch
# tensors in place through the sidecar's reload hook; the version stamps and
# the engine's tensor digests must match the trainer's views bit-exactly.
# Skips (77) without torch, safetensors or curl; not under the sanitizers
# (python loads libstitch.so).
if(TARGET stitchd AND TARGET stitch_shared AND NOT STITCH_SANITIZE)
  add_test(NAME e2e_trainer_engine
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e_trainer_engine.sh
                   ${STITCH_BIN} $<TARGET_FILE:stitch_shared>)
  set_tests_properties(e2e_trainer_engine PROPERTIES
    SKIP_RETURN_CODE 77 TIMEOUT 600)
endif()
# The swarm on a real network (tools/netlab, docs/netlab.md): a seed and 8
# stitchd nodes in network namespaces, 2 regions on tc-shaped links, one
# node behind a NAT, 1 % loss on the backbone, 3 versions (netlab_ci.json,
# about 12 s); bit-exact, complete, and no namespace of the run left after.
# Skips (77) with one line where namespaces cannot be made (not root, no ip
# netns) or nft is missing.
if(TARGET stitchd AND TARGET stitch-synth)
  add_test(NAME netlab
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/netlab.sh ${STITCH_BIN})
  set_tests_properties(netlab PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 120)
  # Faults on the same testbed: a partition healed, kill -9 of 30 % of the
  # nodes during a version and their restart, a seed restart; each must
  # converge bit-exact (netlab_*.json, about 60 s).
  add_test(NAME netlab_faults
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/netlab_faults.sh
                   ${STITCH_BIN})
  set_tests_properties(netlab_faults PROPERTIES SKIP_RETURN_CODE 77
                                                TIMEOUT 240)
  # NAT: half the nodes behind masquerading NATs, nothing let in; all
  # bit-exact, and they upload over the links they dialed (about 15 s;
  # skips without nft).
  add_test(NAME netlab_nat
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/netlab_nat.sh ${STITCH_BIN})
  set_tests_properties(netlab_nat PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 120)
  # The full scenarios, each a target of its own, never run by ctest (root;
  # tens of seconds to minutes each; README "Figures"):
  # cmake --build build --target netlab-sym (netlab_sym.json), ...
  foreach(s 40 _sym _asym _sym_loss _partition _kill _seed_restart _nat
          _ci _lossy _small)
    string(REGEX REPLACE "^_" "" t "${s}")
    add_custom_target(netlab-${t}
      COMMAND python3 ${CMAKE_SOURCE_DIR}/tools/netlab
              ${CMAKE_SOURCE_DIR}/simulations/scenarios/netlab${s}.json
              --bin ${STITCH_BIN}
      USES_TERMINAL
      COMMENT "tools/netlab simulations/scenarios/netlab${s}.json")
    add_dependencies(netlab-${t} stitchd stitch-cli stitch-synth)
    foreach(opt stitch-linkemu stitch-sim)
      if(TARGET ${opt})
        add_dependencies(netlab-${t} ${opt})
      endif()
    endforeach()
  endforeach()
endif()
# netlab's link emulator by itself (tools/linkemu, docs/netlab.md): two
# namespaces joined through it; delay, jitter, loss and rate measured
# against what was set, with generous bounds. Skips (77) without root,
# /dev/net/tun or ip netns.
if(TARGET stitch-linkemu)
  add_test(NAME linkemu
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/linkemu.sh ${STITCH_BIN})
  set_tests_properties(linkemu PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 120)
endif()

# Shipping (README "Install"): the install tree and programs built against
# it (pkg-config, --static, find_package; libstitch alone and with
# libstitch-net), the two .so files' exports and NEEDED, and the systemd
# unit. The install tree is not tested under the sanitizers: its archives
# are instrumented, so a plain consumer could not link them.
if(NOT STITCH_SANITIZE)
  add_test(NAME install_tree
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/install_tree.sh
                   ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR})
  set_tests_properties(install_tree PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 60)
endif()
# The Debian package (cpack -G DEB), unpacked into a scratch root. Not under
# the sanitizers, from which cpack makes no package; in a CUDA build it
# skips (77): the package is made without CUDA (tools/package.sh).
if(NOT STITCH_SANITIZE AND CMAKE_LIBRARY_ARCHITECTURE)
  add_test(NAME deb
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/deb.sh ${CMAKE_BINARY_DIR}
                   ${CMAKE_SOURCE_DIR} ${CMAKE_LIBRARY_ARCHITECTURE} ${STITCH_HAVE_CUDA})
  set_tests_properties(deb PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 120)
endif()
# pip install ./python in a fresh venv: the wheel builds its own libstitch
# (CUDA off), so it runs in a CUDA build too; not under the sanitizers,
# where it would only repeat the same plain build. pip fetches
# scikit-build-core; about a minute.
if(NOT STITCH_SANITIZE)
  add_test(NAME pip_install
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/pip_install.sh
                   ${CMAKE_SOURCE_DIR} $<TARGET_FILE:stitch-cli>)
  # A whole build of the library inside pip: generous for a loaded machine.
  set_tests_properties(pip_install PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 900)
endif()
if(STITCH_SANITIZE)
  set(STITCH_SYMBOLS_MODE sanitize)
endif()
add_test(NAME symbols
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/symbols.sh
                 $<TARGET_FILE:stitch_shared> $<TARGET_FILE:stitch_net_shared>
                 ${STITCH_SYMBOLS_MODE})
set_tests_properties(symbols PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 30)
add_test(NAME systemd_unit
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/systemd_unit.sh ${CMAKE_BINARY_DIR})
set_tests_properties(systemd_unit PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 30)
