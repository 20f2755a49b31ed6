/* jitbmm's C ABI: plans, launches, the CPU reference and the cache location, for other languages (the Python
 * package uses it through ctypes). No C++ exception crosses it: every function returns a status, and
 * jitbmm_last_error() holds the message of this thread's last call. A handle is refused (JITBMM_INVALID_ARGUMENT)
 * once destroyed, or where a handle of another kind is given; destroying it again does nothing. */
#ifndef JITBMM_C_API_H
#define JITBMM_C_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  JITBMM_OK = 0,
  JITBMM_INVALID_ARGUMENT = 1, /* a bad argument; the message names it */
  JITBMM_NO_DRIVER = 2,        /* no CUDA driver / GPU on this machine */
  JITBMM_CUDA_ERROR = 3,       /* a driver call failed; the message names the call and the CUresult */
  JITBMM_COMPILE_ERROR = 4,    /* NVRTC rejected a kernel; the message carries its log */
  JITBMM_INTERNAL_ERROR = 5,
  JITBMM_NO_NVRTC = 6, /* NVRTC (which compiles the kernels) could not be loaded; the message names every place tried */
  JITBMM_UNSUPPORTED_DEVICE = 7 /* the GPU is below the architectures jitbmm compiles for; the message names the
                                 * device, its architecture and the oldest one supported */
} jitbmm_status;

/* Semirings and dtypes by the same names as the C++ API: "log", "max_plus", "min_plus", "max_times",
 * "plus_times"; "f32", "f64", "f16", "bf16". Strides are in elements; a batch stride of 0 broadcasts. */
typedef struct {
  const char* semiring;
  const char* dtype;
  const char* out_dtype; /* NULL: same as dtype */
  int64_t B, M, K, N;
  int64_t a_strides[3];   /* batch, row, col of a[B][M][K] */
  int64_t b_strides[3];   /* batch, row, col of b[B][K][N] */
  int64_t out_strides[3]; /* batch, row, col of out[B][M][N] */
  int with_argmax;        /* also write int32 argmax[B][M][N] (contiguous) */
  const char* precision;  /* NULL or "exact"; "fast" lets the log semiring use one TF32 product per term
                             (about 1e-4 relative error): JITBMM_INVALID_ARGUMENT for any other semiring */
} jitbmm_problem;

/* Fills *problem with a valid row-major problem: the semiring and dtype given (the strings are pointed to, not
 * copied), the sizes, every operand contiguous (a: {M*K, K, 1}, b: {K*N, N, 1}, out: {M*N, N, 1}), the output in
 * the input dtype, no argmax, exact precision. Change fields afterwards as needed. JITBMM_INVALID_ARGUMENT naming the
 * field for an unknown name or sizes out of range (and *problem is left as it was). A zero-initialised struct is not
 * a valid problem: its strides map every element to one address. */
jitbmm_status jitbmm_problem_row_major(jitbmm_problem* problem, const char* semiring, const char* dtype, int64_t B,
                                       int64_t M, int64_t K, int64_t N);

typedef struct jitbmm_plan jitbmm_plan;

const char* jitbmm_version(void);
/* The message of this thread's last call that returns a status: what failed, or "" after an OK one. Valid until this
 * thread's next such call. */
const char* jitbmm_last_error(void);

/* The semirings and dtypes, read from the library's own tables (bindings build their lists from these). Index i is
 * the value of the C++ enum (jitbmm::Semiring, jitbmm::DType), 0 .. count - 1; an index outside that range gives
 * NULL (names) or -1 (numbers). These never fail otherwise and leave jitbmm_last_error() alone. */
typedef enum {
  JITBMM_BACKWARD_MARGINAL = 0,      /* every term weighted by its gradient, summed */
  JITBMM_BACKWARD_ARGMAX_SCATTER = 1 /* grad_out sent to the term the forward's argmax selected */
} jitbmm_backward_kind;
int jitbmm_semiring_count(void);
const char* jitbmm_semiring_name(int index); /* "log", "max_plus", ...: what jitbmm_problem.semiring takes */
int jitbmm_semiring_has_argmax(int index);   /* 1: the forward can report argmax (with_argmax), else 0 */
int jitbmm_semiring_backward(int index);     /* a jitbmm_backward_kind */
int jitbmm_dtype_count(void);
const char* jitbmm_dtype_name(int index); /* "f32", "f64", ...: what jitbmm_problem.dtype takes */
int jitbmm_dtype_size(int index);         /* bytes per element */

/* A plan for the device current on this thread (docs/cpp-api.md, Devices and contexts). */
jitbmm_status jitbmm_plan_create(const jitbmm_problem* problem, jitbmm_plan** plan);
/* The same, for calls on `stream`: while it is being captured into a CUDA graph nothing is tuned (a stored decision
 * or the default variant is used; a plan made later outside the capture tunes as usual). */
jitbmm_status jitbmm_plan_create_on_stream(const jitbmm_problem* problem, void* stream, jitbmm_plan** plan);
/* Compiles at once, on the CPU's cores, the kernels a plan of `problem` and a backward writing the gradients named
 * (grad_a, grad_b: 1 or 0) will load, so that a first training step waits for its longest compile rather than for
 * the sum of them; plans and launches nothing (SemiringBMM::prepare). */
jitbmm_status jitbmm_plan_prepare(const jitbmm_problem* problem, int grad_a, int grad_b);
/* Launches on `stream` (a CUstream / cudaStream_t; NULL is the default stream). argmax may be NULL only when the
 * plan was made without with_argmax. */
jitbmm_status jitbmm_plan_run(const jitbmm_plan* plan, const void* a, const void* b, void* out, int32_t* argmax,
                              void* stream);
/* Gradients (see SemiringBMM::backward in plan.hpp): grad_out laid out like out; grad_a / grad_b (either may be
 * NULL) in a's / b's layout. log reads out; max_plus, min_plus and max_times read argmax (the forward's, int32
 * [B][M][N] contiguous; NULL: recomputed). Asynchronous on `stream`. */
jitbmm_status jitbmm_plan_backward(const jitbmm_plan* plan, const void* a, const void* b, const void* out,
                                   const int32_t* argmax, const void* grad_out, void* grad_a, void* grad_b,
                                   void* stream);
/* Scratch memory from the caller (e.g. a framework's stream-ordered allocator; docs/cpp-api.md): the
 * bytes one forward or backward call takes, and the calls above with a workspace of `workspace_bytes` at
 * `workspace` (device memory on the plan's device, 256-byte aligned, used by nothing else until the call's work on
 * `stream` is done). A NULL workspace with 0 bytes takes the scratch from jitbmm's own pool, as the calls above do.
 * argmax_given: the selecting semirings' backward will get the forward's argmax (else it recomputes it). */
jitbmm_status jitbmm_plan_workspace_bytes(const jitbmm_plan* plan, size_t* bytes);
jitbmm_status jitbmm_plan_backward_workspace_bytes(const jitbmm_plan* plan, int grad_a, int grad_b, int argmax_given,
                                                   size_t* bytes);
/* The same for calls on `stream` (choosing the backward's kernels tunes nothing while it is being captured). */
jitbmm_status jitbmm_plan_backward_workspace_bytes_on_stream(const jitbmm_plan* plan, int grad_a, int grad_b,
                                                             int argmax_given, void* stream, size_t* bytes);
jitbmm_status jitbmm_plan_run_with_workspace(const jitbmm_plan* plan, const void* a, const void* b, void* out,
                                             int32_t* argmax, void* workspace, size_t workspace_bytes, void* stream);
jitbmm_status jitbmm_plan_backward_with_workspace(const jitbmm_plan* plan, const void* a, const void* b,
                                                  const void* out, const int32_t* argmax, const void* grad_out,
                                                  void* grad_a, void* grad_b, void* workspace, size_t workspace_bytes,
                                                  void* stream);
/* jitbmm's pool keeps the scratch memory of calls given no workspace for the next call; this gives back to the
 * driver all of it that no call is using, on every device. */
jitbmm_status jitbmm_release_pool_memory(void);
/* Waits until every build this process runs in the background (a stand-in's chosen variants or strategy; "settled"
 * below) has ended, built or failed; at once where none runs. Before a program removes the cache directory it used,
 * say: a build writes there. The process waits for them at its end in any case. */
jitbmm_status jitbmm_wait_for_builds(void);

/* The kernel calls run now; valid while the plan lives. */
jitbmm_status jitbmm_plan_kernel_name(const jitbmm_plan* plan, const char** name);
/* *settled = 0 while a stand-in runs the calls for the variant the plan chose, which is being built (SemiringBMM::
 * settled: the kernel name changes once it settles; the workspace sizes do not), else 1. */
jitbmm_status jitbmm_plan_settled(const jitbmm_plan* plan, int* settled);
void jitbmm_plan_destroy(jitbmm_plan* plan);

/* Chains (ChainPlan in chain.hpp; docs/chains.md): the forward algorithm of a linear-chain CRF over B sequences of
 * T positions and C states in fused kernels. potentials[b][t][c][p] (t < T - 1) scores the edge from state p at
 * position t to state c at t + 1: torch-struct's LinearChainCRF layout. The HMM form gives the chain by its tables
 * instead: emissions[B][T][C], transitions[C][C] (to, from) and initial[C], the tables optionally per sequence; a CRF
 * problem leaves the HMM form's fields 0. */
#define JITBMM_MAX_CHAIN_STATES 16384 /* the most states a chain may have (C++: jitbmm::kMaxChainStates) */
typedef struct {
  const char* semiring; /* "log" (log-partition) or "max_plus" (Viterbi) */
  const char* dtype;    /* the inputs': "f32", "f64", "f16" or "bf16" (computed in f32) */
  int64_t B, T, C;      /* 0 <= B < 2^30, T >= 1, 1 <= C <= JITBMM_MAX_CHAIN_STATES */
  int64_t strides[4];   /* b, t, c, p of potentials in elements; all 0: contiguous [B][T - 1][C][C] */
  int with_lengths;     /* the calls get int64 lengths[B] on the device, each in [1, T] (else NULL) */
  const char* form;     /* NULL or "crf": the potentials; "hmm": the tables (the _hmm calls; strides all 0) */
  int batched_transitions;       /* hmm: transitions [B][C][C] (else [C][C], shared) */
  int batched_initial;           /* hmm: initial [B][C] (else [C], shared) */
  int64_t emission_strides[3];   /* hmm: b, t, c in elements; all 0: contiguous */
  int64_t transition_strides[3]; /* hmm: b (batched only), to, from; all 0: contiguous */
  int64_t initial_strides[2];    /* hmm: b (batched only), c; all 0: contiguous */
} jitbmm_chain_problem;

typedef struct jitbmm_chain_plan jitbmm_chain_plan;

/* A chain plan for the device current on this thread. Neither it nor its calls tune anything (the chunked
 * strategy's products take stored decisions, the user's cache or the shipped file, or the default), so it needs no
 * stream. The workspace sizes it gives when first asked hold for every later call (a stand-in's plan announces the
 * larger of its two strategies' until it settles). */
jitbmm_status jitbmm_chain_plan_create(const jitbmm_chain_problem* problem, jitbmm_chain_plan** plan);
/* The bytes of a run's `saved` (what the log backward reads; 0 for max_plus, whose backward reads the path), and the
 * scratch bytes one run takes (max_plus with a path keeps a back-pointer per (b, t, c)). */
jitbmm_status jitbmm_chain_plan_saved_bytes(const jitbmm_chain_plan* plan, size_t* bytes);
/* The same bytes for a problem, without a plan (no GPU, no compiling): chain_saved_bytes in chain.hpp. */
jitbmm_status jitbmm_chain_problem_saved_bytes(const jitbmm_chain_problem* problem, size_t* bytes);
jitbmm_status jitbmm_chain_plan_workspace_bytes(const jitbmm_chain_plan* plan, int with_path, size_t* bytes);
/* The forward on `stream`: score[B] in the problem's dtype (f32 for f16 and bf16). Optional (NULL to skip): saved
 * (saved_bytes, 16-byte aligned) for the backward; alpha[B][T][C] in score's dtype, the forward messages;
 * path[B][T] (max_plus), the best path's states (ties: the smallest state; -1 past a sequence's length). The
 * workspace as for jitbmm_plan_run_with_workspace (NULL with 0 bytes: jitbmm's own pool). */
jitbmm_status jitbmm_chain_plan_run(const jitbmm_chain_plan* plan, const void* potentials, const int64_t* lengths,
                                    void* score, void* saved, void* alpha, int32_t* path, void* workspace,
                                    size_t workspace_bytes, void* stream);
/* grad_potentials (contiguous [B][T - 1][C][C], the problem's dtype) = grad_score[b] (score's dtype) times the
 * derivative of score[b]: log reads the
 * forward's saved (edge marginals), max_plus its path (the path's edge indicator). Asynchronous on `stream`. */
jitbmm_status jitbmm_chain_plan_backward(const jitbmm_chain_plan* plan, const void* potentials, const int64_t* lengths,
                                         const void* saved, const int32_t* path, const void* grad_score,
                                         void* grad_potentials, void* stream);
/* The same with the scratch it takes, backward_workspace_bytes (the chunked strategy's tree; NULL with 0 bytes:
 * jitbmm's own pool, which jitbmm_chain_plan_backward always takes). */
jitbmm_status jitbmm_chain_plan_backward_with_workspace(const jitbmm_chain_plan* plan, const void* potentials,
                                                        const int64_t* lengths, const void* saved,
                                                        const int32_t* path, const void* grad_score,
                                                        void* grad_potentials, void* workspace,
                                                        size_t workspace_bytes, void* stream);
/* The HMM form's forward and backward (ChainPlan's HmmInputs calls): the tables laid out as the problem says; the
 * gradients contiguous, each NULL to skip. The backward takes backward_workspace_bytes of scratch (NULL with 0
 * bytes: jitbmm's own pool). */
jitbmm_status jitbmm_chain_plan_run_hmm(const jitbmm_chain_plan* plan, const void* emissions, const void* transitions,
                                        const void* initial, const int64_t* lengths, void* score, void* saved,
                                        void* alpha, int32_t* path, void* workspace, size_t workspace_bytes,
                                        void* stream);
jitbmm_status jitbmm_chain_plan_backward_workspace_bytes(const jitbmm_chain_plan* plan, size_t* bytes);
jitbmm_status jitbmm_chain_plan_backward_hmm(const jitbmm_chain_plan* plan, const void* emissions,
                                             const void* transitions, const void* initial, const int64_t* lengths,
                                             const void* saved, const int32_t* path, const void* grad_score,
                                             void* grad_emissions, void* grad_transitions, void* grad_initial,
                                             void* workspace, size_t workspace_bytes, void* stream);
/* The generated module's name (the forward's entry; the backward's adds "_backward") of the strategy the plan runs
 * now; valid while the plan lives. */
jitbmm_status jitbmm_chain_plan_kernel_name(const jitbmm_chain_plan* plan, const char** name);
/* The strategy the plan runs now (docs/chains.md, "Strategies"): "sequential", "chunked" or "stepped"; a static
 * string. */
jitbmm_status jitbmm_chain_plan_strategy(const jitbmm_chain_plan* plan, const char** strategy);
/* *settled = 0 while a stand-in runs the calls for the strategy the plan chose, whose kernels are being built
 * (ChainPlan::settled: the strategy, the kernel name and the workspace sizes change once it settles), else 1. */
jitbmm_status jitbmm_chain_plan_settled(const jitbmm_chain_plan* plan, int* settled);
void jitbmm_chain_plan_destroy(jitbmm_chain_plan* plan);

/* Chain expectations (ChainExpectation in chain_expectation.hpp): of chains p in the CRF form (the log semiring,
 * contiguous potentials, C <= 1024; the HMM form below) and a field f of the potentials' shape, log Z_p and E_p[F]
 * (F a path's sum of f): what entropy (f = p's potentials: log Z - E), cross-entropy (f = q's: log Z_q - E) and KL
 * (f = p's - q's: E - log Z_p + log Z_q) are. `field` (ExpectationField): 0 the field as given; 1 the field is a chain
 * q's potentials, whose log Z_q comes beside; 2 the field is q's potentials read as the difference p - q, log Z_q
 * beside. The run writes log_z ([B]; [2][B] for fields 1 and 2: log Z_p, then log Z_q) and mean[B] in the output dtype
 * and, if not NULL, saved (saved_bytes: both sweeps' messages, 2 x [2][B][T][C] in the output dtype, 2 x [3][B][T][C]
 * for fields 1 and 2, then in the HMM form copies of transition tables stored [to][from]) for the backward:
 * grad_potentials = grad_log_z mu + grad_mean Cov_p(edge, F) and grad_field = grad_mean mu (fields 1 and 2: q's
 * gradient, as chain_expectation.hpp says; grad_log_z then [2][B]) (contiguous, the problem's dtype; each NULL to
 * skip; grad_log_z, grad_mean NULL: 0), with backward_workspace_bytes of scratch (NULL with 0 bytes: jitbmm's own
 * pool). */
typedef struct jitbmm_chain_expectation jitbmm_chain_expectation;
jitbmm_status jitbmm_chain_expectation_create(const jitbmm_chain_problem* problem, int field,
                                              jitbmm_chain_expectation** plan);
jitbmm_status jitbmm_chain_expectation_bytes(const jitbmm_chain_expectation* plan, size_t* saved_bytes,
                                             size_t* backward_workspace_bytes);
/* The same saved bytes for a problem and field, without a plan (no GPU, no compiling). */
jitbmm_status jitbmm_chain_expectation_saved_bytes(const jitbmm_chain_problem* problem, int field, size_t* bytes);
jitbmm_status jitbmm_chain_expectation_run(const jitbmm_chain_expectation* plan, const void* potentials,
                                           const void* field, const int64_t* lengths, void* log_z, void* mean,
                                           void* saved, void* stream);
jitbmm_status jitbmm_chain_expectation_backward(const jitbmm_chain_expectation* plan, const void* potentials,
                                                const void* field, const int64_t* lengths, const void* saved,
                                                const void* log_z, const void* mean, const void* grad_log_z,
                                                const void* grad_mean, void* grad_potentials, void* grad_field,
                                                void* workspace, size_t workspace_bytes, void* stream);
/* The HMM form's (a problem of form "hmm"; C++: the HmmInputs calls): p's tables and the field's, a second set of
 * the same shapes laid out as p's (the problem's strides and batched_* flags); F is a path's score under the field's
 * tables, its first position's included. The gradients contiguous in the problem's dtype (grad_hmm, grad_field: NULL,
 * or any of their pointers NULL, to skip); a shared table's gradient sums its sequences'. */
typedef struct {
  const void* emissions;   /* [B][T][C] */
  const void* transitions; /* [C][C] (to, from), or [B][C][C] with batched_transitions */
  const void* initial;     /* [C], or [B][C] with batched_initial */
} jitbmm_hmm_tables;
typedef struct {
  void* emissions;
  void* transitions;
  void* initial;
} jitbmm_hmm_gradients;
jitbmm_status jitbmm_chain_expectation_run_hmm(const jitbmm_chain_expectation* plan, const jitbmm_hmm_tables* hmm,
                                               const jitbmm_hmm_tables* field, const int64_t* lengths, void* log_z,
                                               void* mean, void* saved, void* stream);
jitbmm_status jitbmm_chain_expectation_backward_hmm(const jitbmm_chain_expectation* plan, const jitbmm_hmm_tables* hmm,
                                                    const jitbmm_hmm_tables* field, const int64_t* lengths,
                                                    const void* saved, const void* log_z, const void* mean,
                                                    const void* grad_log_z, const void* grad_mean,
                                                    const jitbmm_hmm_gradients* grad_hmm,
                                                    const jitbmm_hmm_gradients* grad_field, void* workspace,
                                                    size_t workspace_bytes, void* stream);
void jitbmm_chain_expectation_destroy(jitbmm_chain_expectation* plan);

/* Chain samples (ChainSampler in chain_samples.hpp): n exact paths of each of B chains in the CRF form (the log
 * semiring, contiguous potentials) or the HMM form (its tables laid out as the problem says: the _hmm calls),
 * paths[B][n][T] int32 on the device (-1 past a length, and throughout for a sequence without a distribution); the
 * same seed draws the same paths. workspace_bytes of scratch (NULL with 0 bytes: jitbmm's own pool). */
typedef struct jitbmm_chain_sampler jitbmm_chain_sampler;
jitbmm_status jitbmm_chain_sampler_create(const jitbmm_chain_problem* problem, jitbmm_chain_sampler** plan);
jitbmm_status jitbmm_chain_sampler_workspace_bytes(const jitbmm_chain_sampler* plan, size_t* bytes);
jitbmm_status jitbmm_chain_sampler_run(const jitbmm_chain_sampler* plan, const void* potentials,
                                       const int64_t* lengths, int64_t n, uint64_t seed, int32_t* paths,
                                       void* workspace, size_t workspace_bytes, void* stream);
/* The same with the seed read on the device from `seed` (8 bytes of device memory, 8-aligned, written by work before
 * this call on `stream`): ChainSampler::with_device_seed. */
jitbmm_status jitbmm_chain_sampler_run_device_seed(const jitbmm_chain_sampler* plan, const void* potentials,
                                                   const int64_t* lengths, int64_t n, const uint64_t* seed,
                                                   int32_t* paths, void* workspace, size_t workspace_bytes,
                                                   void* stream);
jitbmm_status jitbmm_chain_sampler_run_hmm(const jitbmm_chain_sampler* plan, const void* emissions,
                                           const void* transitions, const void* initial, const int64_t* lengths,
                                           int64_t n, uint64_t seed, int32_t* paths, void* workspace,
                                           size_t workspace_bytes, void* stream);
jitbmm_status jitbmm_chain_sampler_run_hmm_device_seed(const jitbmm_chain_sampler* plan, const void* emissions,
                                                       const void* transitions, const void* initial,
                                                       const int64_t* lengths, int64_t n, const uint64_t* seed,
                                                       int32_t* paths, void* workspace, size_t workspace_bytes,
                                                       void* stream);
void jitbmm_chain_sampler_destroy(jitbmm_chain_sampler* plan);

/* The k best paths of chains (ChainKBest in chain_kbest.hpp): the max_plus semiring, the CRF form with contiguous
 * potentials or the HMM form (its tables laid out as the problem says: jitbmm_chain_kbest_run_hmm), C <= 1024,
 * 1 <= k <= 16. scores[B][k] in the output dtype (f32 for half inputs) and paths[B][k][T]
 * int32 (may be NULL) on the device, in order; -inf and -1 past the paths a sequence has. workspace_bytes of scratch
 * (NULL with 0 bytes: jitbmm's own pool). */
typedef struct jitbmm_chain_kbest jitbmm_chain_kbest;
jitbmm_status jitbmm_chain_kbest_create(const jitbmm_chain_problem* problem, int k, jitbmm_chain_kbest** plan);
jitbmm_status jitbmm_chain_kbest_workspace_bytes(const jitbmm_chain_kbest* plan, size_t* bytes);
jitbmm_status jitbmm_chain_kbest_run(const jitbmm_chain_kbest* plan, const void* potentials, const int64_t* lengths,
                                     void* scores, int32_t* paths, void* workspace, size_t workspace_bytes,
                                     void* stream);
jitbmm_status jitbmm_chain_kbest_run_hmm(const jitbmm_chain_kbest* plan, const void* emissions, const void* transitions,
                                         const void* initial, const int64_t* lengths, void* scores, int32_t* paths,
                                         void* workspace, size_t workspace_bytes, void* stream);
void jitbmm_chain_kbest_destroy(jitbmm_chain_kbest* plan);

/* The expectation (entropy) semiring's product (EntropyProduct in entropy_product.hpp): pairs a [2][B][M][K] and b
 * [2][B][K][N], contiguous in dtype "f32" or "f64", give out [2][B][M][N] on the device; the backward writes grad_a
 * and grad_b (either may be NULL) from the forward's out and grad_out [2][B][M][N]. */
typedef struct jitbmm_entropy_product jitbmm_entropy_product;
jitbmm_status jitbmm_entropy_product_create(const char* dtype, int64_t B, int64_t M, int64_t K, int64_t N,
                                            jitbmm_entropy_product** plan);
jitbmm_status jitbmm_entropy_product_run(const jitbmm_entropy_product* plan, const void* a, const void* b, void* out,
                                         void* stream);
jitbmm_status jitbmm_entropy_product_backward(const jitbmm_entropy_product* plan, const void* a, const void* b,
                                              const void* out, const void* grad_out, void* grad_a, void* grad_b,
                                              void* stream);
void jitbmm_entropy_product_destroy(jitbmm_entropy_product* plan);

/* The k-max semiring's product (KMaxProduct in kmax_product.hpp): k-vectors a [k][B][M][K] and b [k][B][K][N],
 * contiguous in dtype "f32" or "f64", 1 <= k <= 16, give out [k][B][M][N] and index [k][B][M][N] (int32, where each
 * value came from: (kk*k + r1)*k + r2, or -1) on the device. */
typedef struct jitbmm_kmax_product jitbmm_kmax_product;
jitbmm_status jitbmm_kmax_product_create(const char* dtype, int k, int64_t B, int64_t M, int64_t K, int64_t N,
                                         jitbmm_kmax_product** plan);
jitbmm_status jitbmm_kmax_product_run(const jitbmm_kmax_product* plan, const void* a, const void* b, void* out,
                                      int32_t* index, void* stream);
void jitbmm_kmax_product_destroy(jitbmm_kmax_product* plan);

/* The CPU reference on host memory: out[B][M][N] as double (row-major, not rounded to the output dtype) and,
 * when argmax is not NULL, the argmax (-1 throughout for a semiring without one: log, plus_times). a and b are laid
 * out as the problem's strides say. */
jitbmm_status jitbmm_reference(const jitbmm_problem* problem, const void* a, const void* b, double* out,
                               int32_t* argmax);

/* The tuning policy of this process: "never", "bucket" or "exact" (any case, as $JITBMM_TUNE); NULL returns to
 * $JITBMM_TUNE (default bucket). */
jitbmm_status jitbmm_set_tune_policy(const char* policy);

/* Sharing choices across processes (ranks on other machines; docs/caching-and-tuning.md): the variants this process
 * settled on, one line each, valid until this thread's next call of jitbmm_export_choices; and storing another
 * process's as this machine's exact decisions for the current device (`stored`, if not NULL, receives how many), after
 * which plans made in this process use them (plans already made keep their variant). Malformed text is
 * JITBMM_INVALID_ARGUMENT naming the line, and nothing is stored. */
jitbmm_status jitbmm_export_choices(const char** text);
jitbmm_status jitbmm_import_choices(const char* text, size_t* stored);

/* The disk cache directory in use: the user's, or where that is refused the trusted read-only one that then serves
 * alone (JITBMM_CACHE_TRUSTED_DIR); "" when the cache is off or neither can be used. */
jitbmm_status jitbmm_cache_dir(const char** dir);

#ifdef __cplusplus
}
#endif

#endif /* JITBMM_C_API_H */
