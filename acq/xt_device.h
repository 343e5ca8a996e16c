/* The device state machine of one plane (issue 24, point 4; docs/device.md): the operator's side of
 * an exposure, as the IFU describes it (notes-azurion-ifu.md section 12): X-ray is a dead-man
 * action, on while the fluoroscopy pedal or the exposure hand switch is held, preceded by a
 * prepare time and followed by the last frame's readout, after which the last image is held (LIH);
 * a radiation-disable switch; faults with codes.
 *
 *   standby --power_on--> ready --fluoro|expose--> prepare --(prepare_ms)--> exposing
 *   exposing --release | series over--> readout --(readout_ms)--> ready (+ lih)
 *   prepare --release--> ready;  any --fault--> fault --reset--> ready;  ready|fault --standby--> standby
 *
 * Pure and deterministic: no clock is read and no thread is started here. Every call takes the
 * current time in ns (the server passes its CLOCK_MONOTONIC, a test or a replay a virtual clock)
 * and reports what happened: the events to publish, whether exposures may be made now, and the
 * next deadline. Time first: the transitions due by `now` happen (at their own deadlines, exactly)
 * before a command is judged, and are reported even when the command is refused. The owner
 * guards the machine with its own lock (the server's st_mu). */
#ifndef XT_DEVICE_H
#define XT_DEVICE_H

#include <stdint.h>

#include "xt_err.h"

typedef enum xt_dev_state {
  XT_DEV_STANDBY = 0, /* powered down: nothing may be pressed */
  XT_DEV_READY,       /* powered, no X-ray: a switch may be pressed */
  XT_DEV_PREPARE,     /* a switch is held; the generator and tube prepare (prepare_ms) */
  XT_DEV_EXPOSING,    /* X-ray on: exposures are made (the pacer's frames) */
  XT_DEV_READOUT,     /* X-ray off; the last frame is read out (readout_ms), then held */
  XT_DEV_FAULT,       /* a fault (code, text) stopped everything; reset or standby leaves it */
  XT_DEV_NSTATES
} xt_dev_state;

/* The commands, in API order: X(enum suffix, name on the API). */
#define XT_DEV_COMMANDS(X)                                                                              \
  X(POWER_ON, "power_on")                   /* standby -> ready */                                      \
  X(STANDBY, "standby")                     /* ready or fault -> standby */                             \
  X(FLUORO, "fluoro")                       /* press the fluoroscopy pedal: ready -> prepare */         \
  X(EXPOSE, "expose")                       /* press the exposure hand switch (a series): ditto */      \
  X(RELEASE, "release")                     /* let go of the switch held */                             \
  X(START, "start")                         /* the API's acquisition start: a latched switch, no latency */ \
  X(STOP, "stop")                           /* the API's acquisition stop: lets go of any switch */     \
  X(RADIATION_DISABLE, "radiation_disable") /* the radiation-disable switch on: ends any X-ray */       \
  X(RADIATION_ENABLE, "radiation_enable")                                                               \
  X(FAULT, "fault")                         /* a fault is raised (code, text) */                        \
  X(RESET, "reset")                         /* the operator resets a fault: fault -> ready */

typedef enum xt_dev_cmd {
#define XT_DEV_CMD_ENUM(e, name) XT_DEV_CMD_##e,
  XT_DEV_COMMANDS(XT_DEV_CMD_ENUM)
#undef XT_DEV_CMD_ENUM
  XT_DEV_NCMDS
} xt_dev_cmd;

/* Which switch started the exposure. The API's switch (POST /v1/acquisition/start) is latched and
 * has no latencies: the server's acquisition runs as it always did. */
typedef enum xt_dev_switch { XT_DEV_SW_NONE = 0, XT_DEV_SW_FLUORO, XT_DEV_SW_EXPOSE, XT_DEV_SW_API, XT_DEV_NSW } xt_dev_switch;

/* Latencies of one switch's exposures, in ms (the owner sets them: protocols and the detector
 * mode's readout time). ns = llround(ms * 1e6). */
typedef struct xt_dev_latency {
  double prepare_ms;     /* switch pressed -> X-ray on (prepare -> exposing) */
  double first_frame_ms; /* X-ray on -> the first exposure is due */
  double readout_ms;     /* X-ray off -> the last frame read out (readout -> ready) */
} xt_dev_latency;

/* Assumed defaults [U] (no published figure was found: notes-azurion-ifu.md section 14 item 8),
 * in this one place. Fluoroscopy keeps the anode turning, so its prepare is short; an exposure
 * series first boosts the anode. The readout default is FD20's full-panel frame time; the server
 * replaces it by the detector mode's (scene/detector_modes.tsv). */
#define XT_DEV_DEFAULT_FLUORO_PREPARE_MS 50.0   /* [U] */
#define XT_DEV_DEFAULT_EXPOSE_PREPARE_MS 300.0  /* [U] */
#define XT_DEV_DEFAULT_FIRST_FRAME_MS 0.0       /* [U] */
#define XT_DEV_DEFAULT_READOUT_MS 33.3          /* [U] FD20 full panel, detector_modes.tsv */

/* One phase of a multiphase series (IFU-p292: duration and frame speed per phase). */
typedef struct xt_dev_phase {
  double duration_s;
  double fps;
} xt_dev_phase;

#define XT_DEV_MAX_PHASES 16
#define XT_DEV_MAX_FPS 120.0
#define XT_DEV_MAX_PHASE_S 3600.0

/* What a command carries besides its name (zeros: none). */
typedef struct xt_dev_args {
  const xt_dev_phase *phases; /* expose: the series (NULL or 0 phases: open-ended at the run's rate) */
  int nphases;
  int fault_code;             /* fault: > 0 */
  const char *fault_text;     /* fault: NULL gives the code's own text */
  double recover_s;           /* fault: > 0, the condition passes by itself after this long (an over-
                                 temperature cooling down): fault -> ready by time; 0 waits for reset */
} xt_dev_args;

#define XT_DEV_MAX_RECOVER_S 3600.0

/* Fault codes with a text of their own [U] (assumed: the IFU's error list was not reached). */
#define XT_DEV_FAULTS(X)                          \
  X(100, "tube: overload or over temperature")    \
  X(200, "generator: high voltage fault")         \
  X(210, "generator: kV out of tolerance")        \
  X(250, "exposure aborted by the system")        \
  X(300, "detector: no frame from the panel")     \
  X(310, "detector: over temperature, not ready") \
  X(400, "switch: held at power on or stuck")     \
  X(900, "injected fault")

enum { XT_DEV_EV_STATE = 1, XT_DEV_EV_LIH, XT_DEV_EV_PHASE, XT_DEV_EV_RADIATION };
#define XT_DEV_MAX_EVENTS 8

typedef struct xt_dev_event {
  int kind;          /* XT_DEV_EV_* */
  uint64_t t_ns;     /* when it happened: the command's time, or the deadline that passed */
  xt_dev_state from, to; /* STATE */
  int cause;         /* STATE: the command (xt_dev_cmd), or -1: time (a deadline) */
  int sw;            /* the exposure's switch (xt_dev_switch) */
  int phase;         /* PHASE: the phase begun (0-based) */
  uint64_t frame;    /* LIH: the frame counter held */
  int disabled;      /* RADIATION: the switch's new position */
} xt_dev_event;

/* What a call did. */
typedef struct xt_dev_out {
  xt_dev_event ev[XT_DEV_MAX_EVENTS];
  int nev;
  int may_expose;    /* exposing now: exposures may be made */
  uint64_t t_next_ns; /* the next deadline (a call at or after it moves the machine), 0: none */
} xt_dev_out;

typedef struct xt_device {
  xt_dev_state state;
  int rad_disabled;               /* the radiation-disable switch is on */
  int held;                       /* the switch held now (xt_dev_switch) */
  int sw;                         /* the switch of the exposure in prepare/exposing/readout */
  xt_dev_latency lat[XT_DEV_NSW]; /* per switch; the API's stays zero */
  uint64_t t_state_ns;            /* the current state was entered */
  uint64_t t_press_ns;            /* the press that began the exposure */
  uint64_t t_deadline_ns;         /* the next timed transition, 0 none */
  /* the series (expose with phases) */
  xt_dev_phase phases[XT_DEV_MAX_PHASES];
  int nphases, phase;
  uint64_t t_phase_ns;            /* the current phase began */
  /* frames of this exposure, and the image held */
  uint64_t frames, last_frame;
  int lih;                        /* a frame is held (last image hold) */
  uint64_t lih_frame;
  /* the fault */
  int fault_code;
  char fault_text[128];
} xt_device;

/* Where the pacer stands (xt_dev_pacing). */
typedef struct xt_dev_pace {
  int expose;        /* exposing: make exposures */
  int sw;            /* whose (xt_dev_switch) */
  uint64_t t0_ns;    /* the first exposure due in this phase (the exposure's first: + first_frame_ms) */
  double fps;        /* the phase's frame rate; 0: the acquisition's */
  uint64_t until_ns; /* exposures due before this only (the phase or the series ends); 0: open-ended */
  uint64_t t_next_ns; /* the next deadline, 0 none */
} xt_dev_pace;

/* Standby at t_ns, radiation enabled, the default latencies. */
void xt_dev_init(xt_device *d, uint64_t t_ns);
xt_dev_latency xt_dev_latency_default(int sw);
/* Moves the machine to now: every deadline <= now passes, in order, at its own time. */
void xt_dev_advance(xt_device *d, uint64_t now, xt_dev_out *out);
/* Time first (xt_dev_advance), then the command. Refused (XT_ESTATE, "device: 'expose' not allowed
 * in state standby"; invalid arguments XT_EINVAL / XT_ERANGE): the machine is left as time made it. */
int xt_dev_command(xt_device *d, xt_dev_cmd cmd, const xt_dev_args *a, uint64_t now, xt_dev_out *out, xt_msg *msg);
/* Would cmd be accepted now (arguments aside)? Without moving the machine: the caller advances it first. */
int xt_dev_allowed(const xt_device *d, xt_dev_cmd cmd);
/* An exposure was made (the owner's frame counter): the image the LIH will hold. */
void xt_dev_frame(xt_device *d, uint64_t counter);
void xt_dev_pacing(const xt_device *d, xt_dev_pace *p);

const char *xt_dev_state_name(xt_dev_state s);
const char *xt_dev_cmd_name(xt_dev_cmd c);
const char *xt_dev_switch_name(int sw);
/* The command named name, or -1. */
int xt_dev_cmd_parse(const char *name);
/* The text of a known fault code, or NULL. */
const char *xt_dev_fault_name(int code);
uint64_t xt_dev_ms_ns(double ms);

#endif /* XT_DEVICE_H */
