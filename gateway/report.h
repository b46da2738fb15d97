/* report.h - `batchgate report` (SPEC.md "Usage and cost"). */
#ifndef BG_REPORT_H
#define BG_REPORT_H

/* argv[1] is "report"; the exit status: 0, 1 (the database failed), 2 (usage). */
int report_main(int argc, char **argv);

#endif
