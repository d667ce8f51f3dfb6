# Sourced by bench/check_kernel_resources.sh and bench/pack_experiments.sh.
# Kernel experiments that only a compile definition builds, so the default kernel carries
# none of their code (bench/NOTES.md, session 25): name=DEFINITION=VALUE[,DEFINITION=VALUE...]
KERNEL_EXPERIMENTS=(late2=FLASHPAGE_PREFILL_LATE_EPILOGUE=2 reg=FLASHPAGE_PREFILL_REG_EPILOGUE=1
                    reg_late2=FLASHPAGE_PREFILL_REG_EPILOGUE=1,FLASHPAGE_PREFILL_LATE_EPILOGUE=2
                    cluster=FLASHPAGE_PREFILL_CLUSTER=1 otma=FLASHPAGE_PREFILL_O_TMA=1
                    rskip=FLASHPAGE_PREFILL_RESCALE=1 rescale0=FLASHPAGE_PREFILL_RESCALE=0
                    poly2=FLASHPAGE_PREFILL_EXP_POLY=2 poly3=FLASHPAGE_PREFILL_EXP_POLY=3
                    poly4=FLASHPAGE_PREFILL_EXP_POLY=4 split=FLASHPAGE_PREFILL_SPLIT_ROLES=1)

# The nvcc -D flags of an experiment entry.
experiment_defines() { echo "${1#*=}" | tr ',' '\n' | sed 's/^/-D/' | tr '\n' ' '; }

# The nvcc command of build dir $1 that compiles unit $2 (e.g. prefill_hopper_bf16), writing
# object $3 instead and no depfile; empty when the build has no such unit. Run it from $1.
unit_nvcc_command() {
  (cd "$1" && ninja -t commands 2>/dev/null) | grep nvcc | grep "/$2.cu.o" | head -1 |
    sed "s| -o [^ ]*\.o| -o $3|; s| -MD -MT [^ ]* -MF [^ ]*||"
}
