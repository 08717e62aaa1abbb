/*
 * gguf/edit.h — editing a model's metadata: everything in one include.
 *
 * An edit is a new list of key/values for a model file, applied in steps:
 *
 *   gguf/kvedit.h   builds the list for one change a user makes (set a
 *                   value from text, create, delete, rename, retype), with
 *                   the rules for names and general.alignment, and
 *                   serializes it;
 *   gguf/header.h   serializes any list (gguf_header_build) in memory,
 *                   checked by parsing it back;
 *   gguf/pad.h      sizes the padding key gguffs.padding so that the
 *                   header keeps its room (in place), or so that the data
 *                   moves by whole file system blocks (cloned);
 *   gguf/commit.h   puts the header into the model file, in place under an
 *                   undo journal or by rewrite and rename (gguf_commit;
 *                   gguf_commit_edit pads first), and finishes what a
 *                   crash interrupted (gguf_recover).
 *
 * This library includes no FUSE header and performs no printing.
 */
#ifndef GGUF_EDIT_H
#define GGUF_EDIT_H

#include "commit.h"
#include "header.h"
#include "kvedit.h"
#include "pad.h"

#endif
