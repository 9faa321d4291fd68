#include "ftcc/recovery/step_loop.hpp"

#include "ftcc/comm/errors.hpp"

namespace ftcc::recovery {

void run_step_loop(ResilientGroup& g, const StepLoop& loop) {
  for (;;) {
    try {
      if (loop.done()) {
        if (!g.all_finished()) {  // a recovery ran: the state may need steps again
          loop.recovered(g.events().back());
          continue;
        }
        loop.finish();
        return;
      }
      g.begin_step(loop.step());
      loop.body();
    } catch (const comm::FaultDetected& e) {
      loop.recovered(g.recover(loop.step(), e.what()));
      continue;
    }
    loop.after_step();
  }
}

}  // namespace ftcc::recovery
