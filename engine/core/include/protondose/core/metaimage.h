#pragma once
/// \file metaimage.h
/// MetaImage (ITK/VV/3D Slicer ".mhd" header + ".raw" data) for 3D float
/// volumes, e.g. doses in Gy. The header's Offset is the centre of the first
/// voxel and TransformMatrix lists the i, j, k axis directions one after the
/// other (ITK's convention), which maps one-to-one onto Grid3. Data are i
/// fastest, like Volume<T>. Format notes: docs/compare.md ("MetaImage").

#include <string>

#include "protondose/core/grid.h"

namespace protondose {

/// Reads a 3D MetaImage. Accepts ElementType MET_FLOAT, MET_DOUBLE, MET_SHORT,
/// MET_USHORT, MET_INT, MET_UINT, MET_UCHAR, MET_CHAR (converted to float, no
/// rescaling), either byte order, data in a separate file (ElementDataFile
/// relative to the header's folder) or LOCAL (after the header). Missing
/// TransformMatrix means identity axes; missing Offset means origin 0.
/// Throws IoError when a file cannot be opened; InputError naming the file and
/// key when the header is malformed (missing or bad NDims/DimSize/ElementType/
/// ElementDataFile, NDims != 3, non-positive spacing, non-orthonormal axes,
/// more than one channel) or the data file is shorter than the header says;
/// UnavailableError for compressed, ASCII or multi-file data.
Volume<float> read_metaimage(const std::string& mhd_path);

/// Writes `volume` as float32 little-endian MetaImage: `mhd_path` (must end in
/// ".mhd") and the data file beside it with the extension ".raw". Both files
/// are written atomically (the .raw first, so a reader that finds the header
/// finds complete data). Throws InputError for a path not ending in ".mhd" or
/// data whose size does not match the grid; IoError when writing fails.
void write_metaimage(const std::string& mhd_path, const Volume<float>& volume);

}  // namespace protondose
